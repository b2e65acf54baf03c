#include "cli/data_source.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiln/error.h"

namespace kiln::cli {
namespace {

// The path from the filesystem's root, as a user would type it (no "." or ".." parts); the path
// as given when it cannot be made absolute.
std::string absolute_path(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

}  // namespace

std::string data_source_text(const DataArgs& a, const std::string& format) {
  nlohmann::ordered_json j = {{"path", absolute_path(a.data)}, {"format", format}};
  if (!a.val.empty()) j["val"] = absolute_path(a.val);
  return j.dump();
}

std::optional<DataSource> parse_data_source(const std::string& text, const std::string& checkpoint) {
  if (text.empty()) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  auto text_of = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  DataSource s;
  if (j.is_object()) s.path = text_of("path"), s.format = text_of("format"), s.val = text_of("val");
  if (s.path.empty() || s.format.empty())
    fail("checkpoint '{}' has a malformed 'recipe.data_source' ({}): it should name the folder and format of the "
         "data it was trained on; give the data with --data", checkpoint, text);
  return s;
}

}  // namespace kiln::cli
