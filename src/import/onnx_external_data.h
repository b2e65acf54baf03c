#pragma once
// Initializers whose bytes an ONNX file keeps in another file beside it (data_location EXTERNAL:
// torch.onnx.export's dynamo exporter writes a model's weights so, to "<model>.onnx.data"): read from
// the model's folder, each file at most once, the path checked so that a file cannot reach outside
// that folder.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::onnx_import {

class ExternalData {
 public:
  // `folder`: the model file's folder; nullopt for a model read from bytes without a file, which
  // may then hold no external data. `path` names the model in messages.
  ExternalData(std::optional<std::filesystem::path> folder, std::string path);

  // The `length` bytes (all from `offset` to the end when it is empty) at `offset` of `location`
  // (relative to the folder) for tensor `tensor`, which needs `expected` bytes. kiln::Error naming
  // the model, the tensor and the file for: no folder, an absolute location or one through "..",
  // a missing or unreadable file, an offset or length that is not a number or reaches past the
  // file's end, and a length other than `expected`.
  std::string read(const std::string& tensor, const std::string& location, const std::string& offset,
                   const std::string& length, size_t expected);

  // The files read, by location, in the order first read: what the model's weights came from.
  const std::vector<std::filesystem::path>& files() const { return files_; }

 private:
  std::optional<std::filesystem::path> folder_;
  std::string path_;
  std::vector<std::filesystem::path> files_;
  std::map<std::string, uint64_t> sizes_;  // each file's size, by location
};

}  // namespace kiln::onnx_import
