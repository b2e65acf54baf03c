#pragma once
// An ONNX file's bytes as the importer's plain structs (import/onnx_model.h), through the ONNX
// library's protobuf classes (onnx_file_reader.cpp; onnx_import_unavailable.cpp in a kiln built
// without libonnx-dev, where it refuses saying what to install).
#include <cstdint>
#include <span>
#include <string>

#include "import/onnx_external_data.h"
#include "import/onnx_model.h"

namespace kiln::onnx_import {

// The model in `bytes`, read from `path` (which messages name). A kiln::Error naming the file, and
// the tensor where one is at fault, for an empty file, one protobuf cannot parse (damaged,
// truncated inside a field, or not ONNX), a file without a graph or nodes, an initializer whose data
// does not fill its shape (truncated or damaged), and sparse initializers. Data kept in external
// files is read through `external` (its errors: import/onnx_external_data.h). It checks only what
// the bytes hold; ordering, missing values and cycles are the graph's checks
// (import/onnx_graph_order.h).
OnnxModel parse_onnx_model(std::span<const uint8_t> bytes, const std::string& path, ExternalData& external);

}  // namespace kiln::onnx_import
