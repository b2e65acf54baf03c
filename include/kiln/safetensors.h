#pragma once
// safetensors files (readable by Python's `safetensors` and PyTorch tools):
//   8-byte little-endian header length N, N bytes of JSON (padded with spaces to a multiple
//   of 8), then the raw little-endian tensor data. The JSON maps each tensor name to
//   {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data start);
//   an optional "__metadata__" holds string -> string pairs.
// Checksums: kiln writes, for every tensor, the metadata entry "kiln.crc32.<tensor name>" ->
//   the CRC-32 of the tensor's data bytes (zlib's crc32, the one of gzip, PNG and Python's
//   zlib.crc32), as 8 lowercase hex digits, e.g. "kiln.crc32.conv1.weight": "0a1b2c3d". They
//   catch a file damaged after it was written (disk, copy, transfer), which would otherwise load
//   and train on. The header itself has no checksum: damage there breaks the JSON or the layout.
#include <cstddef>
#include <cstdint>
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
// names must be unique, non-empty and not "__metadata__". Adds each tensor's checksum to the
// metadata; keys starting with "kiln.crc32." are kiln's own, so any given are replaced.
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A tensor load_safetensors read past (SafetensorsReadOptions::skip_unsupported_dtypes): its
// dtype is one the safetensors format lists but kiln does not compute in, so it has no DType.
struct SkippedTensor {
  std::string name;
  std::string dtype;  // as the file spells it: "I64", "BOOL", "F8_E4M3", ...
  Shape shape;
};

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in file data order
  std::vector<SkippedTensor> skipped;  // in file data order; empty unless asked for
  std::map<std::string, std::string> metadata;  // without the checksums, which load verified
  const NamedTensor* find(const std::string& name) const;  // nullptr if absent
  const SkippedTensor* find_skipped(const std::string& name) const;  // nullptr if absent
};

struct SafetensorsReadOptions {
  // Files written by PyTorch hold tensors of dtypes kiln has no DType for (BatchNorm's int64
  // num_batches_tracked; I8..U64, BOOL, C64, the F8/F6/F4 formats). With this set they are read
  // past and listed in SafetensorsFile::skipped, without their data; their header entries and
  // byte ranges are checked as strictly as any tensor's (and a kiln checksum of one, verified).
  // A dtype the format does not list is refused either way. Off, such a tensor is refused: a
  // kiln checkpoint never holds one.
  bool skip_unsupported_dtypes = false;
};

// Reads and validates the whole file; any inconsistency (truncation, bad header length or
// JSON, unknown dtype, offsets out of range / overlapping / leaving holes, size not matching
// shape x dtype) throws kiln::Error naming the file and the tensor. Every tensor that has a
// checksum is verified: a mismatch (or a checksum that is not 8 hex digits, or names no tensor
// of the file) throws kiln::Error saying the file is corrupt and naming the tensor. Tensors
// without one (files of older kiln versions or of other tools) are read unverified.
SafetensorsFile load_safetensors(const std::string& path, const SafetensorsReadOptions& options = {});

// The NaNs and infinities in a floating-point tensor (F32, F64, F16, BF16; integer tensors
// have none): how many, and the first one's index and value.
struct NonFinite {
  int64_t count = 0;
  int64_t first = -1;
  double first_value = 0;
};
NonFinite find_non_finite(const NamedTensor& tensor);

}  // namespace kiln
