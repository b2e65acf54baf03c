#include "cli/class_name_lists.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kiln::cli {

std::optional<std::vector<std::string>> parse_class_names(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_array()) return std::nullopt;  // a parse error is discarded, not an array
  std::vector<std::string> names;
  for (const auto& n : j) {
    if (!n.is_string()) return std::nullopt;
    names.push_back(n.get<std::string>());
  }
  return names;
}

std::optional<size_t> first_differing_label(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  const size_t common = std::min(a.size(), b.size());
  for (size_t c = 0; c < common; ++c)
    if (a[c] != b[c]) return c;
  if (a.size() != b.size()) return common;
  return std::nullopt;
}

bool same_names_reordered(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  if (a == b || a.size() != b.size()) return false;
  std::vector<std::string> sa = a, sb = b;
  std::sort(sa.begin(), sa.end());
  std::sort(sb.begin(), sb.end());
  return sa == sb;
}

std::string class_names_text(const std::vector<std::string>& names, size_t shown) {
  std::string text;
  for (size_t c = 0; c < std::min(names.size(), shown); ++c) text += fmt::format("{}'{}'", c ? ", " : "", names[c]);
  if (names.size() > shown) text += fmt::format(", ... ({} names)", names.size());
  return text;
}

}  // namespace kiln::cli
