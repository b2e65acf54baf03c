#pragma once
// safetensors files assembled byte by byte, as PyTorch's safetensors.torch.save_file lays them out
// (8-byte header length, the JSON header padded with spaces to a multiple of 8, then each tensor's
// bytes), for what kiln's own writer never produces: int64 counters, other dtypes, bad offsets.
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/dtype.h"
#include "support/temp_dir.h"

namespace kiln::testing {

struct RawTensor {
  std::string name;
  std::string dtype;  // as the header spells it: "I64", "F32", ...
  Shape shape;
  std::vector<uint8_t> data;
  // data_offsets to write instead of the ones the data takes (a malformed file).
  std::optional<std::pair<uint64_t, uint64_t>> offsets = std::nullopt;
};

// The tensors' data back to back, in the order given; data_offsets as they fall unless overridden.
inline void write_safetensors_by_hand(const std::string& path, const std::vector<RawTensor>& tensors,
                                      const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<uint8_t> data;
  for (const RawTensor& t : tensors) {
    const uint64_t begin = data.size(), end = begin + t.data.size();
    const auto [b, e] = t.offsets.value_or(std::make_pair(begin, end));
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {b, e}}};
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(uint8_t(uint64_t(text.size()) >> (8 * i)));
  bytes.insert(bytes.end(), text.begin(), text.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  write_bytes(path, bytes);
}

// Values as their little-endian bytes (x86-64's own order).
template <class T>
std::vector<uint8_t> le_bytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

}  // namespace kiln::testing
