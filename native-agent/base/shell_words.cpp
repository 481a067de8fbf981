#include "native-agent/base/shell_words.h"

#include <optional>

namespace quiver {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n'; }
bool is_operator(char c) {
  return c == '|' || c == '&' || c == ';' || c == '<' || c == '>' || c == '(' || c == ')' ||
         c == '`';
}

Error bad(std::string why, std::size_t offset) {
  return Error(ErrorCode::kInvalidArgument,
               std::move(why) + " (at character " + std::to_string(offset + 1) + ")");
}

}  // namespace

Result<std::vector<std::string>> split_shell_words(std::string_view line) {
  std::vector<std::string> words;
  std::optional<std::string> word;  // nullopt: between words
  std::size_t i = 0;
  while (i < line.size()) {
    char c = line[i];
    if (is_blank(c)) {
      if (word) words.push_back(std::move(*word));
      word.reset();
      ++i;
      continue;
    }
    if (!word) word.emplace();
    if (c == '\'') {
      std::size_t end = line.find('\'', i + 1);
      if (end == std::string_view::npos) return bad("unterminated single quote", i);
      word->append(line.substr(i + 1, end - i - 1));
      i = end + 1;
    } else if (c == '"') {
      std::size_t start = i;
      ++i;
      bool closed = false;
      while (i < line.size()) {
        char d = line[i];
        if (d == '"') {
          closed = true;
          ++i;
          break;
        }
        if (d == '\\' && i + 1 < line.size()) {
          char e = line[i + 1];
          if (e == '"' || e == '\\' || e == '$' || e == '`') {
            word->push_back(e);
            i += 2;
            continue;
          }
          if (e == '\n') {
            i += 2;
            continue;
          }
        }
        word->push_back(d);
        ++i;
      }
      if (!closed) return bad("unterminated double quote", start);
    } else if (c == '\\') {
      if (i + 1 >= line.size()) return bad("trailing backslash", i);
      if (line[i + 1] != '\n') word->push_back(line[i + 1]);
      i += 2;
    } else if (is_operator(c)) {
      return bad(std::string("shell operator '") + c +
                     "' is not supported (no shell runs the command); quote it to pass it "
                     "literally",
                 i);
    } else {
      word->push_back(c);
      ++i;
    }
  }
  if (word) words.push_back(std::move(*word));
  return words;
}

}  // namespace quiver
