# Install rules and the CMake package `kiln`:
#   cmake --install build/package --prefix <P>
# puts the public headers (include/kiln/), the static libraries the public API needs and
# lib/cmake/kiln/ under <P>; a program then builds against it with
#   find_package(kiln REQUIRED)                       # CMAKE_PREFIX_PATH=<P>
#   target_link_libraries(app PRIVATE kiln::kiln)     # or, without CUDA: COMPONENTS cpu, kiln::cpu
# The package config (cmake/kiln-config.cmake.in) finds kiln's link dependencies itself.
#
# Three install components, three export sets:
#   cpu    (kiln-cpu-targets.cmake): kiln::cpu, the public API on the CPU, linking no CUDA library
#          even where kiln is built with its CUDA backend (kiln_engine_cpu, CMakeLists.txt), so its
#          programs run where no CUDA library is installed; with the headers and the package files.
#   full   (kiln-targets.cmake): kiln::kiln, the engine with the CUDA backend where it is built.
#   export (kiln-export-targets.cmake): kiln::export, the exporters of kiln/export.h (kiln_export,
#          cmake/onnx.cmake) above full's engine; with ONNX where kiln was built with libonnx-dev.
#          A set of its own so that kiln::kiln never needs ONNX: find_package(kiln COMPONENTS export)
#          alone looks for it.
# `cmake --install <build> --component cpu` installs the first alone (after building only
# kiln_cpu_libs: no CUDA code is compiled for it).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# kiln::kiln: the whole public API (the engine and everything it links).
add_library(kiln INTERFACE)
target_link_libraries(kiln INTERFACE kiln_engine)
add_library(kiln::kiln ALIAS kiln)
# kiln::cpu: the same API without the CUDA backend (cuda_device_count() is 0, a CUDA device is
# refused). The same libraries as kiln::kiln in a build without CUDA.
add_library(kiln_cpu INTERFACE)
add_library(kiln::cpu ALIAS kiln_cpu)
set_target_properties(kiln_cpu PROPERTIES EXPORT_NAME cpu)

set(KILN_CPU_INSTALL_TARGETS kiln_cpu kiln_core kiln_ops kiln_data)
set(KILN_FULL_INSTALL_TARGETS kiln)
set_target_properties(kiln_engine PROPERTIES EXPORT_NAME engine)
set_target_properties(kiln_core PROPERTIES EXPORT_NAME core)
set_target_properties(kiln_ops PROPERTIES EXPORT_NAME ops)
set_target_properties(kiln_data PROPERTIES EXPORT_NAME data)
if(TARGET kiln_engine_cpu)
  target_link_libraries(kiln_cpu INTERFACE kiln_engine_cpu)
  set_target_properties(kiln_engine_cpu PROPERTIES EXPORT_NAME engine_cpu)
  list(APPEND KILN_CPU_INSTALL_TARGETS kiln_engine_cpu)
  list(APPEND KILN_FULL_INSTALL_TARGETS kiln_engine)
else()
  target_link_libraries(kiln_cpu INTERFACE kiln_engine)
  list(APPEND KILN_CPU_INSTALL_TARGETS kiln_engine)
endif()
# What the cpu component needs built, and nothing else: `cmake --build <build> --target kiln_cpu_libs`.
add_custom_target(kiln_cpu_libs)
get_target_property(KILN_CPU_ENGINE kiln_cpu INTERFACE_LINK_LIBRARIES)
add_dependencies(kiln_cpu_libs kiln_core kiln_ops kiln_data ${KILN_CPU_ENGINE})

set(KILN_PACKAGE_CUDA OFF)
if(TARGET kiln_cuda)
  set(KILN_PACKAGE_CUDA ON)
  list(APPEND KILN_FULL_INSTALL_TARGETS kiln_cuda)
  set_target_properties(kiln_cuda PROPERTIES EXPORT_NAME cuda)
  get_filename_component(KILN_PACKAGE_CUDNN_LIBDIR "${KILN_CUDNN_LIBRARY}" DIRECTORY)
  get_filename_component(KILN_PACKAGE_CUDNN_ROOT "${KILN_CUDNN_INCLUDE}" DIRECTORY)
  if(KILN_NVJPEG_FOUND)
    set(KILN_PACKAGE_NVJPEG_LIBRARY "${KILN_NVJPEG_LIBRARY}")
  endif()
  if(KILN_NCCL_FOUND)
    set(KILN_PACKAGE_NCCL_LIBRARY "${KILN_NCCL_LIBRARY}")
  endif()
endif()
# kiln::export (kiln_export is defined by cmake/onnx.cmake, included before this file, which has also
# set KILN_ONNX_FOUND for the package config). It links the engine of kiln::kiln, so the component
# `export` needs `full` (the package config loads both). kiln_export links ONNX privately, but a
# static library's private links are still the user's to link: its export names them as
# $<LINK_ONLY:onnx>, and the package config finds Protobuf and ONNX for it where kiln_WITH_ONNX.
add_library(kiln::export ALIAS kiln_export)
set_target_properties(kiln_export PROPERTIES EXPORT_NAME export)

# Every installed library (the `package` preset builds this target only).
add_custom_target(kiln_libs)
add_dependencies(kiln_libs kiln_cpu_libs kiln_engine kiln_export)
if(TARGET kiln_cuda)
  add_dependencies(kiln_libs kiln_cuda)
endif()

# A build for this machine's CPU only (KILN_NATIVE_ARCH=ON, the `release` preset's build/release)
# is not installed unless asked for: its programs could stop with "illegal instruction" on
# another CPU. KILN_INSTALL_NATIVE=ON (configure) or KILN_INSTALL_NATIVE=1 (environment of
# cmake --install) installs it anyway; its package says so (kiln_ARCH native).
option(KILN_INSTALL_NATIVE "Let cmake --install install a KILN_NATIVE_ARCH build (runs only on CPUs like this one)" OFF)
if(KILN_ARCH STREQUAL "native" AND NOT KILN_INSTALL_NATIVE)
  install(CODE "
    if(NOT \"\$ENV{KILN_INSTALL_NATIVE}\" STREQUAL \"1\")
      message(FATAL_ERROR \"kiln: ${CMAKE_BINARY_DIR} is compiled for this machine's CPU only \"
        \"(-march=native, KILN_NATIVE_ARCH=ON): a program built against it may stop with 'illegal \"
        \"instruction' on another CPU. Install a portable build instead (-march=${KILN_PORTABLE_ARCH}):\\n\"
        \"  cmake --preset package && cmake --build --preset package && cmake --install build/package --prefix <P>\\n\"
        \"or install this one for this machine only: KILN_INSTALL_NATIVE=1 cmake --install ...\")
    endif()" COMPONENT cpu)
endif()

set(KILN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(TARGETS ${KILN_CPU_INSTALL_TARGETS} EXPORT kiln-cpu-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT cpu
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ${KILN_FULL_INSTALL_TARGETS} EXPORT kiln-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT full
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kiln_export EXPORT kiln-export-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT export
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})  # kiln/export.h comes with the cpu component's headers
install(DIRECTORY include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT cpu FILES_MATCHING PATTERN "*.h")
install(DIRECTORY ${CMAKE_BINARY_DIR}/generated/include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT cpu
        FILES_MATCHING PATTERN "*.h")  # written by the build (cmake/activations.cmake, op_kinds.cmake)
install(EXPORT kiln-cpu-targets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR} COMPONENT cpu)
install(EXPORT kiln-targets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR} COMPONENT full)
install(EXPORT kiln-export-targets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR} COMPONENT export)

configure_package_config_file(cmake/kiln-config.cmake.in ${CMAKE_BINARY_DIR}/kiln-config.cmake
                              INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kiln-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kiln-config.cmake ${CMAKE_BINARY_DIR}/kiln-config-version.cmake
        DESTINATION ${KILN_INSTALL_CMAKEDIR} COMPONENT cpu)

# The package's test (label cpu): install into build/…/install-test/prefix, then configure and build
# tests/install/consumer (the README's short program) against it with find_package(kiln); a
# program on kiln::cpu that must link no CUDA library, run, and find only portable instructions in
# the installed libraries; and a program on kiln::export that writes an ONNX model (where kiln has
# ONNX) and a state_dict (tests/install/install_test.cmake).
if(KILN_BUILD_TESTS)
  set(KILN_INSTALL_REFUSED OFF)
  if(KILN_ARCH STREQUAL "native" AND NOT KILN_INSTALL_NATIVE)
    set(KILN_INSTALL_REFUSED ON)
  endif()
  add_test(NAME kiln_install_package
           COMMAND ${CMAKE_COMMAND} -DKILN_BINARY_DIR=${CMAKE_BINARY_DIR}
                   -DKILN_SOURCE_DIR=${CMAKE_SOURCE_DIR} -DKILN_GENERATOR=${CMAKE_GENERATOR}
                   -DKILN_CXX_COMPILER=${CMAKE_CXX_COMPILER} -DKILN_BUILD_TYPE=${CMAKE_BUILD_TYPE}
                   -DKILN_ARCH=${KILN_ARCH} -DKILN_WITH_CUDA=${KILN_PACKAGE_CUDA} -DKILN_WITH_ONNX=${KILN_ONNX_FOUND}
                   -DKILN_INSTALL_REFUSED=${KILN_INSTALL_REFUSED}
                   -P ${CMAKE_SOURCE_DIR}/tests/install/install_test.cmake)
  set_tests_properties(kiln_install_package PROPERTIES LABELS "cpu;install" TIMEOUT 300)
endif()
