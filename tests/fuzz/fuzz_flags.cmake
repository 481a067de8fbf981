# Instrumentation for the fuzz tree (QUIVER_FUZZ=ON): every object, the core's included, gets
# libFuzzer's coverage hooks, AddressSanitizer and UndefinedBehaviorSanitizer; any UB report stops
# the run like a crash. The fuzz targets themselves link with -fsanitize=fuzzer (tests/fuzz).
if(EMSCRIPTEN OR NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "QUIVER_FUZZ needs clang: CC=clang-14 CXX=clang++-14 cmake -DQUIVER_FUZZ=ON")
endif()
set(QUIVER_SANITIZERS address,undefined)
# -UNDEBUG: assertions stay on (nlohmann's among them: what is undefined behaviour in a release
# build stops the run here). -O1 and line tables only: quicker to build, stacks still readable.
add_compile_options(-fsanitize=fuzzer-no-link,${QUIVER_SANITIZERS} -fno-sanitize-recover=all
                    -fno-omit-frame-pointer -O1 -gline-tables-only -UNDEBUG)
add_link_options(-fsanitize=${QUIVER_SANITIZERS})
