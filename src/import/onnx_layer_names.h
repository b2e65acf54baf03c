#pragma once
// The names the imported layers get. A layer with parameters is named after its initializers'
// module ("layer1.0.conv1" for "layer1.0.conv1.weight" and ".bias"), so its tensors carry
// PyTorch's names and checkpoints, `kiln export --torch` and a re-export keep them. Another layer is
// named after its node: the module path PyTorch's exporter writes into node names
// ("/layer1/layer1.0/relu/Relu" -> "layer1.0.relu"), or the node's output where it has no name,
// with the characters kiln keeps in names (letters, digits, '_', '-', '.'). Every name is unique;
// a taken one gets "_2", "_3", ...
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kiln::onnx_import {

// The module the initializers share: "a.b" for {"a.b.weight", "a.b.bias"}; nothing when they differ,
// have no module part, or it holds characters kiln does not keep in names.
std::optional<std::string> shared_module(const std::vector<std::string>& initializers);

// A node's name as a kiln layer name (see above); `fallback` (its output) where that leaves nothing.
std::string name_from_node(const std::string& node_name, const std::string& op_type, const std::string& fallback);

// `text` with every character kiln does not keep in names replaced by '_', runs of dots made one
// and dots at either end dropped.
std::string kiln_safe_name(const std::string& text);

class LayerNames {
 public:
  // `wanted`, or wanted_2, wanted_3, ... where it is taken ("input" is the graph's input layer's).
  std::string claim(const std::string& wanted);
  bool taken(const std::string& name) const { return used_.count(name) > 0; }

 private:
  std::set<std::string> used_{"input"};
};

}  // namespace kiln::onnx_import
