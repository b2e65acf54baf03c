#include "import/onnx_layer_names.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace kiln::onnx_import {
namespace {

bool kept(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(sep, start), text.size());
    if (end > start) parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// Whether `part` is the op's own part of a node name: "Relu", "Relu_3".
bool is_op_part(const std::string& part, const std::string& op_type) {
  if (part.rfind(op_type, 0) != 0) return false;
  const std::string rest = part.substr(op_type.size());
  if (rest.empty()) return true;
  if (rest[0] != '_' || rest.size() == 1) return false;
  for (size_t i = 1; i < rest.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(rest[i]))) return false;
  return true;
}

}  // namespace

std::string kiln_safe_name(const std::string& text) {
  std::string out;
  for (char c : text) {
    const char k = kept(c) ? c : '_';
    if (k == '.' && (out.empty() || out.back() == '.')) continue;
    out += k;
  }
  while (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

std::optional<std::string> shared_module(const std::vector<std::string>& initializers) {
  std::optional<std::string> module;
  for (const std::string& name : initializers) {
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos || dot == 0) return std::nullopt;
    const std::string prefix = name.substr(0, dot);
    if (module && *module != prefix) return std::nullopt;
    module = prefix;
  }
  if (module && kiln_safe_name(*module) != *module) return std::nullopt;
  return module;
}

std::string name_from_node(const std::string& node_name, const std::string& op_type, const std::string& fallback) {
  // PyTorch's scopes: "/layer1/layer1.0/conv1/Conv", each part a module's name, a child of the
  // module before ("conv1"), or that module's name with the child's index ("layer1.0" after
  // "layer1", "block.3" after "block" in "/features/features.1.0/block/block.3/MatMul": a
  // Sequential's child, named features.1.0.block.3).
  // The last part of a scoped name is the node's own ("Conv", "Mul_3"), also where the importer
  // made the node a kiln one of another type (a stochastic depth's "Mul").
  std::vector<std::string> parts = split(node_name, '/');
  if (parts.size() > 1 && (is_op_part(parts.back(), op_type) || node_name.front() == '/')) parts.pop_back();
  std::vector<std::string> modules;
  for (const std::string& part : parts) {
    if (!modules.empty() && part.rfind(modules.back() + ".", 0) == 0) modules.back() = part;
    else modules.push_back(part);
  }
  std::string path;
  for (const std::string& m : modules) path += (path.empty() ? "" : ".") + m;
  std::string name = kiln_safe_name(path);
  if (name.empty()) name = kiln_safe_name(fallback);
  return name.empty() ? std::string("node") : name;
}

std::string LayerNames::claim(const std::string& wanted) {
  std::string name = wanted;
  for (int k = 2; used_.count(name); ++k) name = fmt::format("{}_{}", wanted, k);
  used_.insert(name);
  return name;
}

}  // namespace kiln::onnx_import
