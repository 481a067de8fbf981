// Shell words: splits a command line such as `node "my server.js" --flag 'a b'` into argv the way
// a POSIX shell would for quoting alone, without running a shell.
//
// `quiver-agent probe --stdio "CMD ARGS"` takes a whole command as one string, as MCP client
// configs and users write it. Running it through /bin/sh would expand variables, globs and
// substitutions (a way to run anything); splitting it here keeps exactly the quoting rules:
//   - unquoted blanks (space, tab, newline) separate words; `''` and `""` are empty words;
//   - '...' is literal; "..." is literal except \" \\ \$ \` (and backslash-newline, removed);
//   - an unquoted backslash escapes the next character.
// Nothing is expanded: `$HOME`, `*`, `~` stay as written. Unquoted shell operators
// (| & ; < > ( ) and backquote) are refused with kInvalidArgument, since without a shell they
// would silently become arguments; quote them to pass them literally. An unterminated quote or a
// trailing backslash is kInvalidArgument too.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"

namespace quiver {

Result<std::vector<std::string>> split_shell_words(std::string_view line);

}  // namespace quiver
