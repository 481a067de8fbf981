# `cmake --install` and the Debian package (CPack), native build only.
#
#   cmake --install build/native --prefix /usr/local       # or DESTDIR=... for a staged tree
#   (cd build/native && cpack -G DEB)                       # quiver-agent_<version>_<arch>.deb
#
# What goes where (GNUInstallDirs; the package uses the prefix /usr):
#   bin/quiver-agent
#   lib/systemd/system/quiver-agent.service     deploy/quiver-agent.service, ExecStart pointed at
#                                               the installed binary
#   share/quiver/examples/*.json                deploy/quickstart.json, deploy/examples/*.json
#   share/quiver/edge/                          the staged edge bundle (scripts/edge-build.sh:
#                                               worker.mjs, glue, wasm, workerd.capnp,
#                                               wrangler.toml), when it has been built; the
#                                               package takes it from QUIVER_EDGE_BUNDLE_DIR
#   share/doc/quiver-agent/                     README.md, deploy/edge.md
# The package's maintainer scripts (deploy/debian/) add the system user `quiver` on install and
# stop the service on removal; enabling it is the operator's step (a config must exist first).
include(GNUInstallDirs)

install(TARGETS quiver-agent RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The unit names the binary where this install puts it: written at install time, when the prefix
# is known (`--prefix`, and /usr for the package, whose staging directory is DESTDIR).
install(CODE "
  file(READ \"${CMAKE_SOURCE_DIR}/deploy/quiver-agent.service\" unit)
  string(REPLACE \"/usr/local/bin/quiver-agent\"
                 \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/quiver-agent\" unit \"\${unit}\")
  set(dir \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")
  message(STATUS \"Installing: \${dir}/quiver-agent.service\")
  file(MAKE_DIRECTORY \"\${dir}\")
  file(WRITE \"\${dir}/quiver-agent.service\" \"\${unit}\")
")

file(GLOB quiver_examples CONFIGURE_DEPENDS "${CMAKE_SOURCE_DIR}/deploy/examples/*.json")
install(FILES "${CMAKE_SOURCE_DIR}/deploy/quickstart.json" ${quiver_examples}
        DESTINATION ${CMAKE_INSTALL_DATADIR}/quiver/examples)
install(FILES "${CMAKE_SOURCE_DIR}/README.md" "${CMAKE_SOURCE_DIR}/deploy/edge.md"
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/quiver-agent)

set(QUIVER_EDGE_BUNDLE_DIR "${CMAKE_SOURCE_DIR}/build/wasm/edge" CACHE PATH
    "The staged quiver-edge bundle (scripts/edge-build.sh) that cmake --install copies, if built")
install(FILES "${QUIVER_EDGE_BUNDLE_DIR}/worker.mjs" "${QUIVER_EDGE_BUNDLE_DIR}/quiver-edge.mjs"
              "${QUIVER_EDGE_BUNDLE_DIR}/quiver-edge.wasm"
              "${QUIVER_EDGE_BUNDLE_DIR}/workerd.capnp" "${QUIVER_EDGE_BUNDLE_DIR}/wrangler.toml"
        DESTINATION ${CMAKE_INSTALL_DATADIR}/quiver/edge OPTIONAL)

# The Debian package.
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "quiver-agent")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Quiver agent: lists upstream MCP servers and keeps their manifests cached")
set(CPACK_PACKAGE_CONTACT "Quiver maintainers")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "net")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # the libraries' packages, from dpkg-shlibdeps
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "nodejs")  # the stdio MCP servers of the examples
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA "${CMAKE_SOURCE_DIR}/deploy/debian/postinst"
                                       "${CMAKE_SOURCE_DIR}/deploy/debian/prerm"
                                       "${CMAKE_SOURCE_DIR}/deploy/debian/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
