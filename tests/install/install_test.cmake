# ctest kiln_install_package: installs the build into a fresh prefix under the build folder, then
# configures and builds tests/install/consumer (the README's short program) against the installed
# package only (find_package(kiln), no package registry, no source tree). Any step failing fails it.
# Run with -DKILN_BINARY_DIR=... -DKILN_SOURCE_DIR=... -DKILN_GENERATOR=... -DKILN_CXX_COMPILER=...
#          -DKILN_BUILD_TYPE=... -P install_test.cmake
set(work ${KILN_BINARY_DIR}/install-test)
set(prefix ${work}/prefix)
file(REMOVE_RECURSE ${work})

function(step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${name} failed (${rc}):\n${out}")
  endif()
  message(STATUS "install test: ${name} ok")
endfunction()

step("cmake --install" ${CMAKE_COMMAND} --install ${KILN_BINARY_DIR} --prefix ${prefix})
foreach(f include/kiln/kiln.h lib/cmake/kiln/kiln-config.cmake lib/cmake/kiln/kiln-config-version.cmake
          lib/cmake/kiln/kiln-targets.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install test: ${prefix}/${f} was not installed")
  endif()
endforeach()
step("configure the consumer" ${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/tests/install/consumer -B ${work}/consumer
     -G ${KILN_GENERATOR} -DCMAKE_BUILD_TYPE=${KILN_BUILD_TYPE} -DCMAKE_CXX_COMPILER=${KILN_CXX_COMPILER}
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
step("build the consumer" ${CMAKE_COMMAND} --build ${work}/consumer)
