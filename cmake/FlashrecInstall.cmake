include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS flashrec EXPORT flashrecTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Only the public headers: the API a trainer includes and the errors it may catch.
install(FILES runtime/include/flashrec/flashrec.hpp ft/include/flashrec/errors.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flashrec)
install(EXPORT flashrecTargets NAMESPACE flashrec:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashrec)
configure_package_config_file(cmake/flashrecConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/flashrecConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashrec)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flashrecConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashrecConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/flashrecConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashrec)
