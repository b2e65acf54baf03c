// Stands in for onnx_file_reader.cpp in a kiln built without the ONNX library (cmake/onnx.cmake):
// the rest of the importer builds, and reading a file says what to install.
#include "import/onnx_file_reader.h"
#include "kiln/error.h"
#include "kiln/onnx_import.h"

namespace kiln::onnx_import {

OnnxModel parse_onnx_model(std::span<const uint8_t>, const std::string& path, ExternalData&) {
  fail("cannot read '{}': this kiln was built without the ONNX library. Install it (Debian: apt-get install libonnx-dev "
       "libprotobuf-dev; scripts/setup.sh does) and build kiln again: cmake finds it when it configures", path);
}

}  // namespace kiln::onnx_import

namespace kiln {
bool onnx_import_available() { return false; }
}  // namespace kiln
