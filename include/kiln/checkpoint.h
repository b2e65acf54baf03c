#pragma once
// Checkpoints as safetensors files (readable by Python's `safetensors` and PyTorch tools):
//   8-byte little-endian header length N, N bytes of JSON (padded with spaces to a multiple
//   of 8), then the raw little-endian tensor data. The JSON maps each tensor name to
//   {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data start);
//   an optional "__metadata__" holds string -> string pairs.
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln {

struct NamedTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<std::byte> data;  // numel(shape) * dtype_size(dtype) bytes, row-major
};

// Writes atomically: "<path>.tmp.<pid>", fsync, rename. On failure the old file is untouched,
// no temporary is left behind, and kiln::Error says why. Tensors are stored in the given order;
// names must be unique, non-empty and not "__metadata__".
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in file data order
  std::map<std::string, std::string> metadata;
  const NamedTensor* find(const std::string& name) const;  // nullptr if absent
};

// Reads and validates the whole file; any inconsistency (truncation, bad header length or
// JSON, unknown dtype, offsets out of range / overlapping / leaving holes, size not matching
// shape x dtype) throws kiln::Error naming the file and the tensor.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace kiln
