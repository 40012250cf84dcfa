# cmake --install puts the libraries, headers and a package config in the prefix, so
# a consumer can find_package(reel) and link reel::reel.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(reel_libs GLOBAL PROPERTY REEL_LIBRARIES)
install(TARGETS ${reel_libs} reel EXPORT reelTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(dir runtime ir tracer passes codegen api)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
install(EXPORT reelTargets NAMESPACE reel:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/reel)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/reelConfig.cmake.in
  ${PROJECT_BINARY_DIR}/reelConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/reel)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/reelConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/reelConfig.cmake ${PROJECT_BINARY_DIR}/reelConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/reel)
