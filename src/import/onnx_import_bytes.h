#pragma once
// import_onnx on a file's bytes already in memory, named `path` in messages: what import_onnx runs
// after reading the file, and what a fuzzer or a caller holding the bytes (a download, an archive
// member) calls without a file.
#include <cstdint>
#include <span>
#include <string>

#include "import/onnx_external_data.h"
#include "kiln/onnx_import.h"

namespace kiln::onnx_import {

// Without a file, the model may keep no data in external files.
ImportedModel import_onnx_bytes(std::span<const uint8_t> bytes, const std::string& path, const OnnxImportOptions& options);

// With its external data read through `external` (import_onnx: from the file's folder). The
// SHA-256 then covers the data files too: the model's bytes' digest and each file's, hashed together.
ImportedModel import_onnx_bytes(std::span<const uint8_t> bytes, const std::string& path, const OnnxImportOptions& options,
                                ExternalData& external);

}  // namespace kiln::onnx_import
