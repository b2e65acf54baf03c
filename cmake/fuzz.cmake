# Fuzzing (fuzz/). Included once by CMakeLists.txt, after the tests.
#
# Always, with the tests: kiln_fuzz_entries, the fuzz targets' entry points as a library (no libFuzzer
# needed, any compiler), which kiln_test_fuzz_regression (tests/fuzz_regression/) links to replay
# every input stored in fuzz/corpus/<target>/ in the CPU suite.
#
# KILN_FUZZ=ON (clang only, in a build directory of its own: fuzz/run.sh configures build/fuzz with
# -DKILN_WITH_CUDA=OFF -DKILN_BUILD_TESTS=OFF): every C++ file of the build is compiled with
# -fsanitize=fuzzer-no-link,address,undefined (coverage for libFuzzer, ASan, UBSan; a sanitizer report
# aborts), and each target gets a libFuzzer executable kiln_fuzz_<target>. kiln_fuzz_seeds (built with
# the tests too) writes their seed inputs. `cmake --build build/fuzz --target kiln_fuzz` builds them all.
option(KILN_FUZZ "Build the libFuzzer targets of fuzz/ with ASan and UBSan (clang; a build directory of its own)" OFF)

set(KILN_FUZZ_TARGETS idx cifar10 safetensors cli_options image_decode pack folder_scan onnx_import)
# cli_options parses with the real command line (tools/cli/kiln_app.h), so it is built from all of
# tools/cli/, the files kiln_cli has besides main() (KILN_CLI_SRC, CMakeLists.txt), with the
# definitions `kiln --version` reads there.
set(KILN_FUZZ_CLI_SRC ${KILN_CLI_SRC})
set(KILN_FUZZ_CLI_DEFINITIONS KILN_VERSION="${PROJECT_VERSION}" KILN_GIT_COMMIT="${KILN_GIT_COMMIT}")

if(KILN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "KILN_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++-16 "
                        "(clang 16 or later; Debian 12: clang-16 and libclang-rt-16-dev), or run fuzz/run.sh")
  endif()
  # CMAKE_CXX_FLAGS as it stands at the end of this directory applies to every target in it.
  string(APPEND CMAKE_CXX_FLAGS
         " -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g")
  string(APPEND CMAKE_EXE_LINKER_FLAGS " -fsanitize=address,undefined")
endif()

if(KILN_BUILD_TESTS OR KILN_FUZZ)
  add_library(kiln_fuzz_support STATIC fuzz/fuzz_support.cpp)
  target_include_directories(kiln_fuzz_support PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
  target_link_libraries(kiln_fuzz_support PUBLIC kiln_core)
  # The seeds' writer, in any build with the tests too: a target's stored inputs can be made again
  # without clang (kiln_fuzz_seeds fuzz/corpus writes every target's).
  add_executable(kiln_fuzz_seeds fuzz/make_seeds.cpp)
  target_link_libraries(kiln_fuzz_seeds PRIVATE kiln_fuzz_support kiln_engine)

  set(entries)
  foreach(t ${KILN_FUZZ_TARGETS})
    list(APPEND entries fuzz/${t}_fuzz.cpp)
  endforeach()
  add_library(kiln_fuzz_entries STATIC ${entries} ${KILN_FUZZ_CLI_SRC})
  target_compile_definitions(kiln_fuzz_entries PRIVATE KILN_FUZZ_NO_MAIN ${KILN_FUZZ_CLI_DEFINITIONS})
  target_include_directories(kiln_fuzz_entries PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/tools)
  # kiln_plot: the CLI sources' kiln plot draws its charts there (tools/cli/plot/, cmake/chart_png.cmake).
  target_link_libraries(kiln_fuzz_entries PUBLIC kiln_fuzz_support kiln_engine PRIVATE CLI11::CLI11 kiln_plot)
endif()

if(TARGET kiln_test_fuzz_regression)
  target_link_libraries(kiln_test_fuzz_regression PRIVATE kiln_fuzz_entries)
endif()

if(KILN_FUZZ)
  add_custom_target(kiln_fuzz)
  foreach(t ${KILN_FUZZ_TARGETS})
    add_executable(kiln_fuzz_${t} fuzz/${t}_fuzz.cpp)
    target_link_libraries(kiln_fuzz_${t} PRIVATE kiln_fuzz_support kiln_engine)
    target_link_options(kiln_fuzz_${t} PRIVATE -fsanitize=fuzzer)
    add_dependencies(kiln_fuzz kiln_fuzz_${t})
  endforeach()
  target_sources(kiln_fuzz_cli_options PRIVATE ${KILN_FUZZ_CLI_SRC})
  target_compile_definitions(kiln_fuzz_cli_options PRIVATE ${KILN_FUZZ_CLI_DEFINITIONS})
  target_include_directories(kiln_fuzz_cli_options PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/tools)
  target_link_libraries(kiln_fuzz_cli_options PRIVATE CLI11::CLI11 kiln_plot)
  add_dependencies(kiln_fuzz kiln_fuzz_seeds)
endif()
