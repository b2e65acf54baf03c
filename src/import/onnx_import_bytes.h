#pragma once
// import_onnx on a file's bytes already in memory, named `path` in messages: what import_onnx runs
// after reading the file, and what a fuzzer or a caller holding the bytes (a download, an archive
// member) calls without a file.
#include <cstdint>
#include <span>
#include <string>

#include "kiln/onnx_import.h"

namespace kiln::onnx_import {

ImportedModel import_onnx_bytes(std::span<const uint8_t> bytes, const std::string& path, const OnnxImportOptions& options);

}  // namespace kiln::onnx_import
