// Stands in for onnx_proto_writer.cpp in a kiln built without the ONNX library (cmake/onnx.cmake):
// everything else of the export builds and runs, and writing the model says what to install.
#include "export/onnx_graph.h"
#include "kiln/error.h"

namespace kiln::onnx_export {

void require_onnx_library(const std::string& path) {
  fail("cannot write '{}': this kiln was built without the ONNX library. Install it (Debian: apt-get install "
       "libonnx-dev libprotobuf-dev; scripts/setup.sh does) and build kiln again: cmake finds it when it configures",
       path);
}

int64_t write_onnx_model(const Graph&, const std::string& path) {
  require_onnx_library(path);
  return 0;
}

}  // namespace kiln::onnx_export

namespace kiln {
bool onnx_export_available() { return false; }
}  // namespace kiln
