#pragma once
// How each ONNX operator maps onto kiln's layers: a table of small handlers, one entry an operator,
// in files by family (onnx_ops_conv.cpp, onnx_ops_activation.cpp, onnx_ops_pool.cpp,
// onnx_ops_join.cpp, onnx_ops_head.cpp, onnx_ops_plumbing.cpp). The importer looks each node up here;
// an operator without an entry is refused, naming the node.
#include <string>
#include <vector>

#include "import/onnx_import_context.h"

namespace kiln::onnx_import {

struct OnnxOp {
  const char* domain;   // "" for ONNX's operators; "kiln" for the patterns' nodes (import/onnx_patterns.h)
  const char* op_type;
  // The initializers that will be the layer's parameters (their module names the layer); nullptr
  // for an operator without parameters.
  std::vector<std::string> (*parameters)(const OnnxNode& node, ImportContext& ctx);
  // What of the node kiln cannot train, one line each ("Conv node 'x': attribute 'auto_pad' is
  // SAME_UPPER; kiln takes ..."), appended to `problems`; run on every node before any is mapped, so
  // all are listed at once. nullptr: nothing to check.
  void (*check)(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems);
  // Appends the node's layer(s) to the Blueprint (or maps its output onto its input's value).
  void (*map)(const OnnxNode& node, ImportContext& ctx);
};

// The handler of `node`'s operator, or nullptr.
const OnnxOp* find_onnx_op(const OnnxNode& node);

// What to say of an operator kiln has no handler for: the reason and what to do, where kiln knows
// one ("Softmax: kiln trains on logits; export the model without its softmax"), else a general line.
std::string unsupported_op_hint(const OnnxNode& node);

// Each family's handlers.
extern const std::vector<OnnxOp> kConvOps, kActivationOps, kPoolOps, kJoinOps, kHeadOps, kPlumbingOps;
// onnx_ops_channel.cpp, onnx_ops_layer_norm.cpp, onnx_ops_layer_scale.cpp, onnx_ops_adaptive_pool.cpp,
// onnx_ops_group_norm.cpp, onnx_ops_stochastic_depth.cpp, onnx_ops_linear_over_map.cpp,
// onnx_as_strided.cpp, onnx_ops_split.cpp
extern const std::vector<OnnxOp> kChannelOps, kLayerNormOps, kLayerScaleOps, kAdaptivePoolOps, kGroupNormOps,
    kStochasticDepthOps, kLinearOverMapOps, kAsStridedOps, kSplitOps;

// Shared by the handlers' checks: an attribute's value, or the default.
int64_t int_attribute(const OnnxNode& node, const char* name, int64_t fallback);
float float_attribute(const OnnxNode& node, const char* name, float fallback);
// PyTorch's value of a Python float an exporter wrote as float32 (an epsilon, a dropout ratio): the
// shortest decimal that rounds to the file's float, 0.001 for float(0.001), so a float64 program
// normalizes with eps = 0.001 as PyTorch does, not with 0.0010000000474974513.
double torch_decimal(float stored);
// A value read as double: torch_decimal where it is a float32's value (converts to float and back
// unchanged), else the double itself (a float64 constant, kiln's metadata), which is PyTorch's already.
double torch_decimal_of(double stored);
// float_attribute as torch_decimal: the attribute's PyTorch value, or the default's.
double decimal_attribute(const OnnxNode& node, const char* name, float fallback);
// PyTorch's d from a float32 the exporter wrote as 1 - d (ONNX BatchNorm's momentum, a mask's keep
// probability): the shortest decimal whose float(1 - d) is the file's value (0.1 from 0.9f, whose
// own complement is 0.10000002); 1 - stored where no decimal of up to 9 places rounds so.
double torch_complement_decimal(float stored);
std::vector<int64_t> ints_attribute(const OnnxNode& node, const char* name);
std::string string_attribute(const OnnxNode& node, const char* name, const std::string& fallback);
// A problem line about one attribute: "<node>: attribute '<name>' is <value>; <supported>".
std::string attribute_problem(const OnnxNode& node, const char* name, const std::string& value,
                              const std::string& supported);

}  // namespace kiln::onnx_import
