# Native configuration: every dependency from Debian packages.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(SQLite3 REQUIRED)
# OpenSSL's libcrypto: the OAuth token store's AES-256-GCM and the OAuth client's random bytes and
# JWT signatures (native-agent/store/token_store.cpp, native-agent/upstream/oauth_http.cpp).
find_package(OpenSSL REQUIRED)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
# cpp-httplib's class layout depends on its feature macros: take its pkg-config flags as they are.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

add_library(quiver_json INTERFACE)
target_link_libraries(quiver_json INTERFACE nlohmann_json::nlohmann_json)

# The RESP codec uses hiredis' protocol reader only (read.c); <hiredis/read.h> as in the package.
add_library(quiver_resp_reader INTERFACE)
target_link_libraries(quiver_resp_reader INTERFACE PkgConfig::HIREDIS)

add_library(quiver_warnings INTERFACE)
target_compile_options(quiver_warnings INTERFACE -Wall -Wextra -Wpedantic -Wno-unused-parameter)

if(QUIVER_BUILD_TESTS)
  find_package(GTest REQUIRED)
  set(QUIVER_GTEST_MAIN GTest::gtest_main)
  set(QUIVER_GTEST GTest::gtest)
endif()
