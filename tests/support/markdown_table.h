// Reading the repository's Markdown documents from tests that tie a document to the code (a
// table in a doc lists exactly what the code has): the file's text and a table row's cells.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace quiver::testing {

// `relative` under the source tree (QUIVER_SOURCE_DIR); "" when it cannot be read.
inline std::string read_source_file(const std::string& relative) {
  std::ifstream in(std::string(QUIVER_SOURCE_DIR) + "/" + relative, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

inline std::string trim(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// The cells of a table row `| a | b |`, trimmed; empty for a line that is not a row.
inline std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> out;
  std::string t = trim(line);
  if (t.size() < 2 || t.front() != '|' || t.back() != '|') return out;
  std::stringstream row(t.substr(1, t.size() - 2));
  std::string cell;
  while (std::getline(row, cell, '|')) out.push_back(trim(cell));
  return out;
}

}  // namespace quiver::testing
