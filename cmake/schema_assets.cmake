# schema/ is the single source of every Lua script and SQL statement. They are compiled into the
# core as string constants (shared/schema_assets.h), so the core needs no file I/O and nobody
# keeps a second copy.
file(GLOB QUIVER_SCHEMA_ASSET_FILES CONFIGURE_DEPENDS
  "${CMAKE_SOURCE_DIR}/schema/lua/*.lua"
  "${CMAKE_SOURCE_DIR}/schema/*.sql")
set(QUIVER_SCHEMA_ASSETS_CPP "${CMAKE_BINARY_DIR}/generated/schema_assets.cpp")
add_custom_command(
  OUTPUT "${QUIVER_SCHEMA_ASSETS_CPP}"
  COMMAND ${CMAKE_COMMAND} -DOUT=${QUIVER_SCHEMA_ASSETS_CPP} -DROOT=${CMAKE_SOURCE_DIR}/schema
          "-DFILES=${QUIVER_SCHEMA_ASSET_FILES}"
          -P "${CMAKE_SOURCE_DIR}/cmake/embed_schema_assets.cmake"
  DEPENDS ${QUIVER_SCHEMA_ASSET_FILES} "${CMAKE_SOURCE_DIR}/cmake/embed_schema_assets.cmake"
  COMMENT "Embedding schema/ assets"
  VERBATIM)
