#!/usr/bin/env bash
# The core (shared/) is sans-I/O: no sockets, files, threads, processes, clocks or randomness.
# Time and random bytes come in as parameters. This check fails on any header or call that
# would break that, so the rule holds without anyone remembering it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pattern='#include <(thread|mutex|shared_mutex|chrono|fstream|random|ctime|time\.h|filesystem|future|atomic|condition_variable|csignal|signal\.h)>'
pattern+='|#include <(sys/|unistd|fcntl|netinet|netdb|arpa/|pthread|poll\.h|spawn\.h|dirent)'
pattern+='|\b(fopen|freopen|popen|getenv|setenv|std::random_device|rand|srand|time|clock|gettimeofday|clock_gettime|system|fork|exec[lv]p?e?)\s*\('
pattern+='|\b(steady_clock|system_clock|high_resolution_clock|std::thread|std::ifstream|std::ofstream)\b'
if hits=$(grep -rnE "$pattern" "$root/shared" --include='*.h' --include='*.cpp'); then
  echo "shared/ must stay sans-I/O; found:"
  echo "$hits"
  exit 1
fi
echo "shared/ is free of I/O, threads, clocks and randomness"
