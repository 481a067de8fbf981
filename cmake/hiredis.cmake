# Fetches hiredis 1.2 (the Debian 13 source package) into the build tree once, and defines:
#   QUIVER_HIREDIS_SRC      its sources
#   QUIVER_HIREDIS_INCLUDE  a directory holding only a `hiredis` link to them (<hiredis/read.h>)
#   quiver_hiredis          (native only) hiredis + hiredis_ssl as a static library, OpenSSL linked
# A failed fetch (offline, no Debian apt source) fails the configure step with the reason.
set(QUIVER_HIREDIS_DEPS "${CMAKE_BINARY_DIR}/_deps")
execute_process(
  COMMAND bash "${CMAKE_SOURCE_DIR}/scripts/fetch-hiredis.sh" "${QUIVER_HIREDIS_DEPS}"
  RESULT_VARIABLE hiredis_fetch_rc
  ERROR_VARIABLE hiredis_fetch_err)
if(NOT hiredis_fetch_rc EQUAL 0)
  string(STRIP "${hiredis_fetch_err}" hiredis_fetch_err)
  message(FATAL_ERROR
    "fetching the hiredis 1.2 sources failed (scripts/fetch-hiredis.sh needs Debian's package "
    "archive, reached through the machine's apt sources): ${hiredis_fetch_err}")
endif()
set(QUIVER_HIREDIS_SRC "${QUIVER_HIREDIS_DEPS}/hiredis-1.2/src")
set(QUIVER_HIREDIS_INCLUDE "${QUIVER_HIREDIS_DEPS}/hiredis-1.2/include")

if(NOT QUIVER_WASM)
  add_library(quiver_hiredis STATIC
    "${QUIVER_HIREDIS_SRC}/alloc.c"
    "${QUIVER_HIREDIS_SRC}/async.c"
    "${QUIVER_HIREDIS_SRC}/hiredis.c"
    "${QUIVER_HIREDIS_SRC}/net.c"
    "${QUIVER_HIREDIS_SRC}/read.c"
    "${QUIVER_HIREDIS_SRC}/sds.c"
    "${QUIVER_HIREDIS_SRC}/sockcompat.c"
    "${QUIVER_HIREDIS_SRC}/ssl.c")
  set_target_properties(quiver_hiredis PROPERTIES C_STANDARD 99 POSITION_INDEPENDENT_CODE ON)
  target_compile_options(quiver_hiredis PRIVATE -w)
  target_include_directories(quiver_hiredis SYSTEM PUBLIC "${QUIVER_HIREDIS_INCLUDE}")
  target_link_libraries(quiver_hiredis PUBLIC OpenSSL::SSL OpenSSL::Crypto)
endif()
