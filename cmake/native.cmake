# Native configuration: every dependency from Debian packages.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(SQLite3 REQUIRED)
# OpenSSL's libcrypto: the OAuth token store's AES-256-GCM and the OAuth client's random bytes and
# JWT signatures (native-agent/store/token_store.cpp, native-agent/upstream/oauth_http.cpp).
find_package(OpenSSL REQUIRED)
# cpp-httplib's class layout depends on its feature macros: take its pkg-config flags as they are.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

add_library(quiver_json INTERFACE)
target_link_libraries(quiver_json INTERFACE nlohmann_json::nlohmann_json)

# hiredis 1.2 with its TLS part (hiredis_ssl): Debian 12's libhiredis-dev is 0.14, which has no
# TLS, so the Debian 13 source package is fetched at configure time into the build tree
# (scripts/fetch-hiredis.sh, which the wasm build uses too) and compiled here as a static library.
# Consumers include <hiredis/hiredis.h>, <hiredis/hiredis_ssl.h>, <hiredis/read.h>.
include(${CMAKE_CURRENT_LIST_DIR}/hiredis.cmake)

# The RESP codec uses hiredis' protocol reader only (read.c).
add_library(quiver_resp_reader INTERFACE)
target_link_libraries(quiver_resp_reader INTERFACE quiver_hiredis)

add_library(quiver_warnings INTERFACE)
target_compile_options(quiver_warnings INTERFACE -Wall -Wextra -Wpedantic -Wno-unused-parameter)

if(QUIVER_BUILD_TESTS)
  find_package(GTest REQUIRED)
  set(QUIVER_GTEST_MAIN GTest::gtest_main)
  set(QUIVER_GTEST GTest::gtest)
endif()
