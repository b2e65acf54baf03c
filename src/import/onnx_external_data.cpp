#include "import/onnx_external_data.h"

#include <charconv>
#include <fstream>

#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

constexpr const char* kSaveWhole =
    "save it in one file with onnx.save_model(model, path, save_as_external_data=False) (a model under 2 GiB fits)";

std::optional<uint64_t> number(const std::string& text) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end) return std::nullopt;
  return v;
}

}  // namespace

ExternalData::ExternalData(std::optional<std::filesystem::path> folder, std::string path)
    : folder_(std::move(folder)), path_(std::move(path)) {}

std::string ExternalData::read(const std::string& tensor, const std::string& location, const std::string& offset_text,
                               const std::string& length_text, size_t expected) {
  if (!folder_)
    fail("'{}': tensor '{}' keeps its data in an external file ('{}'), and this model was read from memory, not from "
         "its file: import the .onnx file itself (its folder holds the data), or {}", path_, tensor, location, kSaveWhole);
  const std::filesystem::path relative(location);
  bool escapes = location.empty() || relative.is_absolute() || relative.has_root_name();
  for (const std::filesystem::path& part : relative) escapes = escapes || part == "..";
  if (escapes)
    fail("'{}': tensor '{}' keeps its data in '{}', which is not a file beside the model (ONNX's external data lies "
         "in the model's folder, named by a relative path without '..'): the file is damaged or was edited; {}",
         path_, tensor, location, kSaveWhole);
  const std::filesystem::path file = *folder_ / relative;
  auto size = sizes_.find(location);
  if (size == sizes_.end()) {
    std::error_code ec;
    const uint64_t bytes = std::filesystem::is_regular_file(file, ec) ? std::filesystem::file_size(file, ec) : 0;
    if (ec || !std::filesystem::is_regular_file(file))
      fail("'{}': tensor '{}' keeps its data in '{}', which is missing or not a readable file: copy the model's data "
           "file with it (torch.onnx.export writes it beside the .onnx file), or {}", path_, tensor, file.string(),
           kSaveWhole);
    size = sizes_.emplace(location, bytes).first;
    files_.push_back(file);
  }
  const std::optional<uint64_t> offset = offset_text.empty() ? std::optional<uint64_t>(0) : number(offset_text);
  const std::optional<uint64_t> length =
      length_text.empty() ? (offset && *offset <= size->second ? std::optional<uint64_t>(size->second - *offset)
                                                               : std::nullopt)
                          : number(length_text);
  if (!offset || !length || *offset > size->second || *length > size->second - *offset)
    fail("'{}': tensor '{}' reads bytes {}+{} of '{}', which holds {} bytes: the data file is truncated or belongs to "
         "another export; export the model again", path_, tensor, offset_text.empty() ? "0" : offset_text,
         length_text.empty() ? "(to the end)" : length_text, file.string(), size->second);
  if (*length != expected)
    fail("'{}': tensor '{}' needs {} bytes but its external data in '{}' is {} bytes: the file is damaged; export the "
         "model again", path_, tensor, expected, file.string(), *length);
  std::string bytes(size_t(*length), '\0');
  std::ifstream in(file, std::ios::binary);
  in.seekg(std::streamoff(*offset));
  if (!in.read(bytes.data(), std::streamsize(bytes.size())))
    fail("'{}': reading tensor '{}' from '{}' failed (bytes {}+{}): the data file changed or cannot be read", path_,
         tensor, file.string(), *offset, *length);
  return bytes;
}

}  // namespace kiln::onnx_import
