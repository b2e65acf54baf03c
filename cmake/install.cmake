# Install rules and the CMake package `kiln`:
#   cmake --install build/release --prefix <P>
# puts the public headers (include/kiln/), the static libraries the public API needs and
# lib/cmake/kiln/ under <P>; a program then builds against it with
#   find_package(kiln REQUIRED)                       # CMAKE_PREFIX_PATH=<P>
#   target_link_libraries(app PRIVATE kiln::kiln)
# The package config (cmake/kiln-config.cmake.in) finds kiln's link dependencies itself.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# kiln::kiln: the whole public API (the engine and everything it links).
add_library(kiln INTERFACE)
target_link_libraries(kiln INTERFACE kiln_engine)
add_library(kiln::kiln ALIAS kiln)

set(KILN_INSTALL_TARGETS kiln kiln_engine kiln_core kiln_ops kiln_data)
set_target_properties(kiln_engine PROPERTIES EXPORT_NAME engine)
set_target_properties(kiln_core PROPERTIES EXPORT_NAME core)
set_target_properties(kiln_ops PROPERTIES EXPORT_NAME ops)
set_target_properties(kiln_data PROPERTIES EXPORT_NAME data)
set(KILN_PACKAGE_CUDA OFF)
if(TARGET kiln_cuda)
  set(KILN_PACKAGE_CUDA ON)
  list(APPEND KILN_INSTALL_TARGETS kiln_cuda)
  set_target_properties(kiln_cuda PROPERTIES EXPORT_NAME cuda)
  get_filename_component(KILN_PACKAGE_CUDNN_LIBDIR "${KILN_CUDNN_LIBRARY}" DIRECTORY)
  get_filename_component(KILN_PACKAGE_CUDNN_ROOT "${KILN_CUDNN_INCLUDE}" DIRECTORY)
  if(KILN_NVJPEG_FOUND)
    set(KILN_PACKAGE_NVJPEG_LIBRARY "${KILN_NVJPEG_LIBRARY}")
  endif()
endif()

set(KILN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(TARGETS ${KILN_INSTALL_TARGETS} EXPORT kiln-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT kiln-targets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR})

configure_package_config_file(cmake/kiln-config.cmake.in ${CMAKE_BINARY_DIR}/kiln-config.cmake
                              INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kiln-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kiln-config.cmake ${CMAKE_BINARY_DIR}/kiln-config-version.cmake
        DESTINATION ${KILN_INSTALL_CMAKEDIR})

# The package's test (label cpu): install into build/install-test/prefix, then configure and build
# tests/install/consumer (the README's short program) against it with find_package(kiln).
if(KILN_BUILD_TESTS)
  add_test(NAME kiln_install_package
           COMMAND ${CMAKE_COMMAND} -DKILN_BINARY_DIR=${CMAKE_BINARY_DIR}
                   -DKILN_SOURCE_DIR=${CMAKE_SOURCE_DIR} -DKILN_GENERATOR=${CMAKE_GENERATOR}
                   -DKILN_CXX_COMPILER=${CMAKE_CXX_COMPILER} -DKILN_BUILD_TYPE=${CMAKE_BUILD_TYPE}
                   -P ${CMAKE_SOURCE_DIR}/tests/install/install_test.cmake)
  set_tests_properties(kiln_install_package PROPERTIES LABELS "cpu;install" TIMEOUT 300)
endif()
