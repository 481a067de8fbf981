# Wasm configuration (Emscripten 3.1.6). See shared/TOOLCHAIN notes in the README:
#  - never -I/usr/include: host headers shadow Emscripten's libc. nlohmann comes in through a
#    directory that holds only a `nlohmann` symlink.
#  - third-party C sources (hiredis reader, SQLite amalgamation) are fetched into the build tree.
#  - exceptions: the core returns errors as values; -fwasm-exceptions is a safety net at the
#    export boundary (an escaped throw becomes an INTERNAL error, not an aborted instance).
set(QUIVER_WASM ON)
set(QUIVER_DEPS_DIR "${CMAKE_BINARY_DIR}/_deps")

execute_process(
  COMMAND bash "${CMAKE_SOURCE_DIR}/scripts/fetch-wasm-deps.sh" "${QUIVER_DEPS_DIR}"
  RESULT_VARIABLE fetch_rc)
if(NOT fetch_rc EQUAL 0)
  message(FATAL_ERROR "fetching wasm third-party sources failed (scripts/fetch-wasm-deps.sh)")
endif()

set(QUIVER_WASM_EH_FLAGS -fwasm-exceptions)
add_compile_options(${QUIVER_WASM_EH_FLAGS})
add_link_options(${QUIVER_WASM_EH_FLAGS})

file(MAKE_DIRECTORY "${CMAKE_BINARY_DIR}/include-shim")
file(CREATE_LINK /usr/include/nlohmann "${CMAKE_BINARY_DIR}/include-shim/nlohmann" SYMBOLIC)
add_library(quiver_json INTERFACE)
target_include_directories(quiver_json SYSTEM INTERFACE "${CMAKE_BINARY_DIR}/include-shim")

# hiredis' protocol reader: the same hiredis 1.2 sources the native build compiles (fetched by
# scripts/fetch-hiredis.sh); the reader alone, no sockets.
include(${CMAKE_CURRENT_LIST_DIR}/hiredis.cmake)
add_library(quiver_resp_reader STATIC
  "${QUIVER_HIREDIS_SRC}/alloc.c"
  "${QUIVER_HIREDIS_SRC}/read.c"
  "${QUIVER_HIREDIS_SRC}/sds.c")
target_include_directories(quiver_resp_reader SYSTEM PUBLIC "${QUIVER_HIREDIS_INCLUDE}")
target_compile_options(quiver_resp_reader PRIVATE -w -Wno-incompatible-function-pointer-types)

# SQLite amalgamation, for the edge's FTS5 search. Compiling it takes ~40 s: it is its own target
# so that the object is cached in the build tree.
add_library(quiver_sqlite STATIC "${QUIVER_DEPS_DIR}/sqlite/sqlite3.c")
target_include_directories(quiver_sqlite SYSTEM PUBLIC "${QUIVER_DEPS_DIR}/sqlite")
target_compile_options(quiver_sqlite PRIVATE -O2 -w)
target_compile_definitions(quiver_sqlite PUBLIC
  SQLITE_ENABLE_FTS5 SQLITE_OMIT_LOAD_EXTENSION SQLITE_THREADSAFE=0 SQLITE_DEFAULT_MEMSTATUS=0
  SQLITE_OMIT_DEPRECATED SQLITE_DQS=0)

add_library(quiver_warnings INTERFACE)
target_compile_options(quiver_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter)

if(QUIVER_BUILD_TESTS)
  # GoogleTest from the Debian source tree, without threads.
  set(gtest_disable_pthreads ON CACHE BOOL "" FORCE)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory(/usr/src/googletest "${CMAKE_BINARY_DIR}/googletest" EXCLUDE_FROM_ALL)
  set(QUIVER_GTEST_MAIN gtest_main)
  set(QUIVER_GTEST gtest)

  # Test binaries run under node (Node 20 cannot load the default glue without this flag).
  set(QUIVER_WASM_TEST_LINK_FLAGS -sENVIRONMENT=node -sALLOW_MEMORY_GROWTH=1 -sNODERAWFS=1
      -sEXIT_RUNTIME=1)
endif()
# emcmake's default emulator flags (--experimental-wasm-threads) are rejected by Node 20.
find_program(QUIVER_NODE node REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR "${QUIVER_NODE};--no-experimental-fetch")
