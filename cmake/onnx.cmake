# The exporters (src/export/, include/kiln/export.h): `kiln export`, ONNX models and PyTorch
# state_dicts. Included by CMakeLists.txt after the targets that link them (kiln_cli, the tests).
#
# kiln_export is a library of its own above the engine, so that kiln::kiln (and its install package's
# cpu and full components) never depends on ONNX; the package installs it as its export component,
# kiln::export (cmake/install.cmake, included after this file: it reads KILN_ONNX_FOUND).
# The ONNX writer goes through the ONNX library, Debian bookworm's libonnx-dev 1.12
# (scripts/setup.sh installs it with libprotobuf-dev and protobuf-compiler): its CMake package
# (ONNXConfig.cmake) gives the imported target `onnx` with ONNX_NAMESPACE=onnx and ONNX_ML=1 (its
# protobuf classes are built with the ML types: onnx/onnx_pb.h includes onnx-ml.pb.h) and links
# onnx_proto, which links protobuf::libprotobuf without finding Protobuf itself, so FindProtobuf runs
# first. Without the library everything else builds, and export_onnx says what to install
# (src/export/onnx_unavailable.cpp). -DKILN_WITH_ONNX=OFF builds that way on purpose.
option(KILN_WITH_ONNX "Build the ONNX exporter where libonnx-dev is found" ON)

set(KILN_ONNX_FOUND OFF)
if(KILN_WITH_ONNX)
  find_package(Protobuf QUIET)
  if(Protobuf_FOUND)
    find_package(ONNX CONFIG QUIET)
  endif()
  if(ONNX_FOUND AND TARGET onnx AND TARGET protobuf::libprotobuf)
    set(KILN_ONNX_FOUND ON)
    message(STATUS "kiln: ONNX export with ONNX ${ONNX_VERSION} (${ONNX_DIR}), protobuf ${Protobuf_VERSION}")
  else()
    message(STATUS "kiln: ONNX export off: libonnx-dev / libprotobuf-dev not found (scripts/setup.sh installs them)")
  endif()
else()
  message(STATUS "kiln: ONNX export off (KILN_WITH_ONNX=OFF)")
endif()

file(GLOB KILN_EXPORT_SRC CONFIGURE_DEPENDS src/export/*.cpp)
list(FILTER KILN_EXPORT_SRC EXCLUDE REGEX "src/export/onnx_(proto_writer|unavailable)\\.cpp$")
# Each layer kind's export, in its family folder (src/ops/<family>/*_export.cpp), and the generated
# list of them: they write kiln's own ONNX graph (src/export/onnx_graph.h), so they build either way.
include(${CMAKE_CURRENT_LIST_DIR}/layer_exports.cmake)
kiln_layer_exports(${CMAKE_BINARY_DIR}/generated/layer_exports.cpp KILN_LAYER_EXPORT_SRC)
add_library(kiln_export STATIC ${KILN_EXPORT_SRC} ${KILN_LAYER_EXPORT_SRC} ${CMAKE_BINARY_DIR}/generated/layer_exports.cpp)
target_link_libraries(kiln_export PUBLIC kiln_engine)
if(KILN_ONNX_FOUND)
  target_sources(kiln_export PRIVATE src/export/onnx_proto_writer.cpp)
  target_link_libraries(kiln_export PRIVATE onnx)
else()
  target_sources(kiln_export PRIVATE src/export/onnx_unavailable.cpp)
endif()

# The ONNX importer (src/import/, kiln/onnx_import.h) lives in kiln_export too: only its file reader
# goes through the ONNX library; the ordering, folding, patterns and op mapping build either way,
# and without the library import_onnx says what to install (src/import/onnx_import_unavailable.cpp).
file(GLOB KILN_IMPORT_SRC CONFIGURE_DEPENDS src/import/*.cpp)
list(FILTER KILN_IMPORT_SRC EXCLUDE REGEX "src/import/onnx_(file_reader|import_unavailable)\\.cpp$")
target_sources(kiln_export PRIVATE ${KILN_IMPORT_SRC})
if(KILN_ONNX_FOUND)
  target_sources(kiln_export PRIVATE src/import/onnx_file_reader.cpp)
else()
  target_sources(kiln_export PRIVATE src/import/onnx_import_unavailable.cpp)
endif()

target_link_libraries(kiln_cli PRIVATE kiln_export)
if(TARGET kiln_fuzz_entries)  # it compiles tools/cli/, `kiln export` included
  target_link_libraries(kiln_fuzz_entries PUBLIC kiln_export)
endif()
if(TARGET kiln_fuzz_cli_options)  # the importer's libFuzzer executable too (fuzz/onnx_import_fuzz.cpp)
  target_link_libraries(kiln_fuzz_cli_options PRIVATE kiln_export)
  target_link_libraries(kiln_fuzz_onnx_import PRIVATE kiln_export)
endif()
if(TARGET kiln_fuzz_seeds)  # onnx_import's seeds go through the exporter
  target_link_libraries(kiln_fuzz_seeds PRIVATE kiln_export)
endif()
if(TARGET kiln_test_export)
  target_link_libraries(kiln_test_export PRIVATE kiln_export)
  add_dependencies(kiln_test_export kiln_cli)  # its CLI tests run the kiln binary
endif()
if(TARGET kiln_test_import)  # tests/import/: they write their ONNX files with the library's protobuf classes
  target_link_libraries(kiln_test_import PRIVATE kiln_export)
  if(KILN_ONNX_FOUND)
    target_link_libraries(kiln_test_import PRIVATE onnx)
    target_compile_definitions(kiln_test_import PRIVATE KILN_TEST_ONNX_PROTOBUF=1)
  endif()
endif()
if(TARGET kiln_test_gpu)
  target_link_libraries(kiln_test_gpu PRIVATE kiln_export)
endif()
if(TARGET kiln_test_architecture)  # layer_exports_test.cpp: every layer kind has an export
  target_link_libraries(kiln_test_architecture PRIVATE kiln_export)
endif()
