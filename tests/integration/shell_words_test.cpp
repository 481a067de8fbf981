// split_shell_words: the quoting rules of a POSIX shell, none of its expansions.
#include "native-agent/base/shell_words.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace quiver {
namespace {

using Words = std::vector<std::string>;

Words split(const std::string& line) {
  auto words = split_shell_words(line);
  EXPECT_TRUE(words.ok()) << line << ": " << (words.ok() ? "" : words.error().message);
  return words.ok() ? *words : Words{};
}

TEST(ShellWords, SplitsOnBlanksAndKeepsQuotedTextTogether) {
  EXPECT_EQ(split("node server.js stdio"), (Words{"node", "server.js", "stdio"}));
  EXPECT_EQ(split("  node\t'my server.js'  \"a b\" "), (Words{"node", "my server.js", "a b"}));
  EXPECT_EQ(split("a'b c'\"d\"e"), (Words{"ab cde"}));
  EXPECT_EQ(split("x '' \"\""), (Words{"x", "", ""}));
  EXPECT_EQ(split(""), Words{});
  EXPECT_EQ(split("   "), Words{});
}

TEST(ShellWords, BackslashesEscapeLikeTheShell) {
  EXPECT_EQ(split(R"(a\ b c)"), (Words{"a b", "c"}));
  EXPECT_EQ(split(R"("say \"hi\" \\ \$x \n")"), (Words{R"(say "hi" \ $x \n)"}));
  EXPECT_EQ(split(R"('single \n stays')"), (Words{R"(single \n stays)"}));
  EXPECT_EQ(split(R"(\|)"), (Words{"|"}));
}

TEST(ShellWords, ExpandsNothing) {
  EXPECT_EQ(split("echo $HOME ~ *.js"), (Words{"echo", "$HOME", "~", "*.js"}));
}

TEST(ShellWords, RefusesOperatorsAndUnfinishedQuoting) {
  for (const char* bad :
       {"a | b", "a; b", "a && b", "a > f", "$(x)", "`x`", "'open", "\"open", "trailing\\"}) {
    auto words = split_shell_words(bad);
    ASSERT_FALSE(words.ok()) << bad;
    EXPECT_EQ(words.error().code, ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(split("'a | b' \"c;d\""), (Words{"a | b", "c;d"}));
}

}  // namespace
}  // namespace quiver
