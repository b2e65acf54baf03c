# ctest kiln_install_package: installs the build into fresh prefixes under the build folder and
# builds programs against the installed package only (find_package(kiln), no package registry, no
# source tree). Any step failing fails it.
#  1. A build for this CPU only (KILN_NATIVE_ARCH=ON) is refused by cmake --install unless
#     KILN_INSTALL_NATIVE=1; the package records its -march level (kiln_ARCH), and the libraries
#     of a portable build hold no instruction beyond it (objdump: no AVX/AVX-512/FMA/BMI/MOVBE
#     for x86-64-v2, no SSSE3/SSE4/POPCNT either for x86-64).
#  2. All components (prefix/): tests/install/consumer (the README's short program, kiln::kiln)
#     configures and builds.
#  3. The cpu component alone (prefix-cpu/, cmake --install --component cpu): tests/install/
#     consumer_cpu (kiln::cpu) configures with CUDAToolkit unfindable, links none of libcuda,
#     libcudart, libcublas(Lt), libcudnn, libnvrtc, libnvjpeg (readelf, ldd) and runs: one epoch of
#     a tiny CNN on the CPU, a CUDA device refused. In a build with CUDA, find_package(kiln) without
#     components then fails with a message that points to COMPONENTS cpu.
#  4. The export component (prefix/; the cpu component installs no kiln-export-targets.cmake, and
#     find_package(kiln COMPONENTS export) in prefix-cpu/ fails saying export needs the full
#     component): tests/install/consumer_export (kiln::export) builds and runs in its build folder,
#     writing a tiny CNN as an ONNX model and a PyTorch state_dict; both files must be there and
#     non-empty. In a kiln built without ONNX (KILN_WITH_ONNX OFF) export_onnx must refuse, saying
#     what to install, and the state_dict is still written. The package records kiln_WITH_ONNX.
# Run with -DKILN_BINARY_DIR=... -DKILN_SOURCE_DIR=... -DKILN_GENERATOR=... -DKILN_CXX_COMPILER=...
#          -DKILN_BUILD_TYPE=... -DKILN_ARCH=... -DKILN_WITH_CUDA=... -DKILN_WITH_ONNX=...
#          -DKILN_INSTALL_REFUSED=... -P install_test.cmake
set(work ${KILN_BINARY_DIR}/install-test)
set(prefix ${work}/prefix)
set(cpu_prefix ${work}/prefix-cpu)
file(REMOVE_RECURSE ${work})

function(step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${name} failed (${rc}):\n${out}")
  endif()
  message(STATUS "install test: ${name} ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

# 1. A build for this CPU only is not installed by mistake.
set(install_env ${CMAKE_COMMAND} -E env --unset=KILN_INSTALL_NATIVE)
if(KILN_INSTALL_REFUSED)
  execute_process(COMMAND ${install_env} ${CMAKE_COMMAND} --install ${KILN_BINARY_DIR} --prefix ${work}/refused
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  # CMake wraps the message to the terminal's width where the build path makes it long, so it is
  # matched with its whitespace folded.
  string(REGEX REPLACE "[ \t\r\n]+" " " flat "${out}")
  if(rc EQUAL 0 OR NOT flat MATCHES "compiled for this machine's CPU only" OR EXISTS ${work}/refused/lib)
    message(FATAL_ERROR "install test: cmake --install of a -march=native build was not refused (${rc}):\n${out}")
  endif()
  message(STATUS "install test: a -march=native build is refused without KILN_INSTALL_NATIVE=1 ok")
  set(install_env ${CMAKE_COMMAND} -E env KILN_INSTALL_NATIVE=1)
endif()

step("cmake --install" ${install_env} ${CMAKE_COMMAND} --install ${KILN_BINARY_DIR} --prefix ${prefix})
step("cmake --install --component cpu" ${install_env} ${CMAKE_COMMAND} --install ${KILN_BINARY_DIR}
     --prefix ${cpu_prefix} --component cpu)
foreach(f include/kiln/kiln.h include/kiln/export.h lib/cmake/kiln/kiln-config.cmake
          lib/cmake/kiln/kiln-config-version.cmake lib/cmake/kiln/kiln-cpu-targets.cmake
          lib/cmake/kiln/kiln-targets.cmake lib/cmake/kiln/kiln-export-targets.cmake lib/libkiln_export.a)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install test: ${prefix}/${f} was not installed")
  endif()
endforeach()
foreach(f lib/cmake/kiln/kiln-targets.cmake lib/cmake/kiln/kiln-export-targets.cmake lib/libkiln_cuda.a
          lib/libkiln_export.a)
  if(EXISTS ${cpu_prefix}/${f})
    message(FATAL_ERROR "install test: the cpu component installed ${f}")
  endif()
endforeach()

file(STRINGS ${prefix}/lib/cmake/kiln/kiln-config.cmake arch_line REGEX "^set\\(kiln_ARCH ")
if(NOT arch_line STREQUAL "set(kiln_ARCH \"${KILN_ARCH}\")")
  message(FATAL_ERROR "install test: the package records '${arch_line}', the build -march='${KILN_ARCH}'")
endif()
file(STRINGS ${prefix}/lib/cmake/kiln/kiln-config.cmake onnx_line REGEX "^set\\(kiln_WITH_ONNX ")
if(NOT onnx_line STREQUAL "set(kiln_WITH_ONNX ${KILN_WITH_ONNX})")
  message(FATAL_ERROR "install test: the package records '${onnx_line}', the build ONNX ${KILN_WITH_ONNX}")
endif()
# Instructions beyond the level, as objdump writes them after an address and a tab: every VEX/EVEX
# instruction (AVX, AVX2, FMA, F16C, AVX-512: v...), AVX-512 mask instructions, BMI1/2, LZCNT, MOVBE;
# below x86-64-v2, SSE3/SSSE3/SSE4.x, POPCNT and CRC32 too. (tzcnt is left out: GCC writes `rep bsf`
# for any level, which objdump shows as tzcnt.)
set(beyond "v[a-z0-9]+|k(mov|and|andn|or|xor|xnor|not|ortest|test|shiftl|shiftr|add|unpck)[bwdq]+|andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|lzcnt|movbe")
if(KILN_ARCH STREQUAL "x86-64")
  string(APPEND beyond "|popcnt|crc32|pshufb|palignr|ph(add|sub)[swd]+|pmaddubsw|pmulhrsw|pabs[bwd]|psign[bwd]"
         "|pmulld|pmuldq|pm(in|ax)(sb|sd|ub|uw|ud|uq)|p?blend[a-z]*|dpp[sd]|insertps|extractps|pextr[bdq]"
         "|pinsr[bdq]|pmov[sz]x[a-z]+|ptest|round[sp][sd]|packusdw|pcmp(eq|gt)q|pcmp[ei]str[im]|movntdqa"
         "|mpsadbw|phminposuw|lddqu|addsubp[sd]|h(add|sub)p[sd]|movs[hl]dup|movddup")
endif()
find_program(objdump NAMES objdump)
function(beyond_level archive out_var)
  execute_process(COMMAND ${objdump} -d --no-show-raw-insn ${archive} COMMAND grep -E -m 5 ":\t(${beyond})( |$)"
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()
if(KILN_ARCH MATCHES "^x86-64(-v2)?$")
  if(NOT objdump)
    message(FATAL_ERROR "install test: objdump (binutils) is needed to check the libraries' instructions")
  endif()
  file(GLOB archives ${prefix}/lib/*.a)
  foreach(a ${archives})
    beyond_level(${a} found)
    if(NOT found STREQUAL "")
      message(FATAL_ERROR "install test: ${a} holds instructions beyond -march=${KILN_ARCH}:\n${found}")
    endif()
  endforeach()
  message(STATUS "install test: the installed libraries hold no instruction beyond -march=${KILN_ARCH} ok")
elseif(KILN_ARCH STREQUAL "native" AND objdump)
  # The check itself, on this build: with AVX on this CPU, -march=native code must show some.
  file(READ /proc/cpuinfo cpuinfo)
  if(cpuinfo MATCHES " avx2 ")
    beyond_level(${prefix}/lib/libkiln_ops.a found)
    if(found STREQUAL "")
      message(FATAL_ERROR "install test: the instruction check finds no AVX in a -march=native build on an AVX2 CPU")
    endif()
    message(STATUS "install test: -march=native build: the instruction check finds AVX in it ok")
  endif()
else()
  message(STATUS "install test: -march='${KILN_ARCH}' build: instruction check skipped")
endif()

# 2. kiln::kiln, the README's program.
step("configure the consumer" ${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/tests/install/consumer -B ${work}/consumer
     -G ${KILN_GENERATOR} -DCMAKE_BUILD_TYPE=${KILN_BUILD_TYPE} -DCMAKE_CXX_COMPILER=${KILN_CXX_COMPILER}
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
step("build the consumer" ${CMAKE_COMMAND} --build ${work}/consumer)

# 3. kiln::cpu, where no CUDA is found.
set(no_cuda -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DCMAKE_DISABLE_FIND_PACKAGE_CUDA=ON)
step("configure the kiln::cpu consumer without CUDA" ${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/tests/install/consumer_cpu
     -B ${work}/consumer_cpu -G ${KILN_GENERATOR} -DCMAKE_BUILD_TYPE=${KILN_BUILD_TYPE}
     -DCMAKE_CXX_COMPILER=${KILN_CXX_COMPILER} -DCMAKE_PREFIX_PATH=${cpu_prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
     ${no_cuda})
step("build the kiln::cpu consumer" ${CMAKE_COMMAND} --build ${work}/consumer_cpu)
set(app ${work}/consumer_cpu/app_cpu)
set(cuda_libs "libcuda\\.|libcudart|libcublas|libcudnn|libnvrtc|libnvjpeg")
step("readelf -d app_cpu" readelf -d ${app})
if(NOT step_output MATCHES "NEEDED")
  message(FATAL_ERROR "install test: readelf shows no NEEDED entry in ${app}:\n${step_output}")
endif()
string(REGEX MATCHALL "[^\n]*(${cuda_libs})[^\n]*" linked "${step_output}")
step("ldd app_cpu" ldd ${app})
string(REGEX MATCHALL "[^\n]*(${cuda_libs})[^\n]*" loaded "${step_output}")
if(linked OR loaded)
  message(FATAL_ERROR "install test: the kiln::cpu program links CUDA libraries:\n${linked}\n${loaded}")
endif()
message(STATUS "install test: the kiln::cpu program links no CUDA library ok")
step("run the kiln::cpu consumer" ${CMAKE_COMMAND} -E env KILN_THREADS=1 ${app})
message(STATUS "${step_output}")
if(KILN_WITH_CUDA)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/tests/install/consumer -B ${work}/consumer_no_cuda
                          -G ${KILN_GENERATOR} -DCMAKE_CXX_COMPILER=${KILN_CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
                          -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF ${no_cuda}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc EQUAL 0 OR NOT out MATCHES "COMPONENTS cpu")
    message(FATAL_ERROR "install test: kiln::kiln without CUDA did not fail pointing to COMPONENTS cpu (${rc}):\n${out}")
  endif()
  message(STATUS "install test: find_package(kiln) without CUDA points to COMPONENTS cpu ok")
endif()

# 4. kiln::export: an ONNX model (where kiln has ONNX) and a state_dict, written by the program.
step("configure the kiln::export consumer" ${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/tests/install/consumer_export
     -B ${work}/consumer_export -G ${KILN_GENERATOR} -DCMAKE_BUILD_TYPE=${KILN_BUILD_TYPE}
     -DCMAKE_CXX_COMPILER=${KILN_CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
step("build the kiln::export consumer" ${CMAKE_COMMAND} --build ${work}/consumer_export)
set(onnx_mode no-onnx)
if(KILN_WITH_ONNX)
  set(onnx_mode onnx)
endif()
step("run the kiln::export consumer (${onnx_mode})" ${CMAKE_COMMAND} -E chdir ${work}/consumer_export
     ${CMAKE_COMMAND} -E env KILN_THREADS=1 ${work}/consumer_export/app_export ${onnx_mode})
message(STATUS "${step_output}")
set(exported ${work}/consumer_export/tiny.safetensors)
if(KILN_WITH_ONNX)
  list(APPEND exported ${work}/consumer_export/tiny.onnx)
elseif(EXISTS ${work}/consumer_export/tiny.onnx)
  message(FATAL_ERROR "install test: the kiln::export consumer wrote tiny.onnx in a kiln built without ONNX")
endif()
foreach(f ${exported})
  if(NOT EXISTS ${f})
    message(FATAL_ERROR "install test: the kiln::export consumer wrote no ${f}")
  endif()
  file(SIZE ${f} bytes)
  if(bytes EQUAL 0)
    message(FATAL_ERROR "install test: the kiln::export consumer wrote an empty ${f}")
  endif()
endforeach()
message(STATUS "install test: the kiln::export consumer wrote its files ok")
execute_process(COMMAND ${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/tests/install/consumer_export
                        -B ${work}/consumer_export_cpu_only -G ${KILN_GENERATOR} -DCMAKE_CXX_COMPILER=${KILN_CXX_COMPILER}
                        -DCMAKE_PREFIX_PATH=${cpu_prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
string(REGEX REPLACE "[ \t\r\n]+" " " flat "${out}")  # CMake wraps the message, as in step 1
if(rc EQUAL 0 OR NOT flat MATCHES "kiln::export needs the full component")
  message(FATAL_ERROR "install test: find_package(kiln COMPONENTS export) in a cpu-only install did not fail "
          "saying export needs the full component (${rc}):\n${out}")
endif()
message(STATUS "install test: find_package(kiln COMPONENTS export) in a cpu-only install says it needs full ok")
