// The elementwise activations: ONNX's operators for kiln's activations (PyTorch's functionals of
// the same names), and the patterns' nodes (import/onnx_patterns.h). Each keeps its input's form.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "import/onnx_op_table.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

using AddLayer = void (*)(const OnnxNode& node, ImportContext& ctx, Blueprint& bp, const std::string& name);

void map_with(const OnnxNode& node, ImportContext& ctx, AddLayer add) {
  const MappedValue x = ctx.input(node, 0);
  add(node, ctx, ctx.from(x), ctx.layer_name(node));
  ctx.produce(node, x.form, x.channels);
}

// ---- Clip: ReLU6 or ReLU ------------------------------------------------------------------------

// Clip's bounds: inputs 1 and 2 from opset 11, attributes min and max before; an absent bound is
// none (+-infinity). nullopt for a bound the file computes.
struct ClipBounds {
  std::optional<double> min, max;
  bool known = true;
};

ClipBounds clip_bounds(const OnnxNode& node, ImportContext& ctx) {
  ClipBounds b;
  b.min = -std::numeric_limits<double>::infinity(), b.max = std::numeric_limits<double>::infinity();
  if (const OnnxAttribute* a = node.attribute("min")) b.min = a->f;
  if (const OnnxAttribute* a = node.attribute("max")) b.max = a->f;
  for (size_t k = 1; k <= 2; ++k) {
    if (node.input(k).empty()) continue;
    const std::optional<double> v = ctx.scalar_input(node, k);
    if (!v) b.known = false;
    (k == 1 ? b.min : b.max) = v;
  }
  return b;
}

bool is_relu6(const ClipBounds& b) { return b.known && *b.min == 0 && *b.max == 6; }
bool is_relu(const ClipBounds& b) { return b.known && *b.min == 0 && std::isinf(*b.max) && *b.max > 0; }

void check_clip(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const ClipBounds b = clip_bounds(node, ctx);
  if (is_relu6(b) || is_relu(b)) return;
  const auto text = [](const std::optional<double>& v) { return v ? fmt::format("{}", *v) : std::string("computed"); };
  problems.push_back(fmt::format("{}: it clips to [{}, {}]; kiln has ReLU6 (Clip to [0, 6]) and ReLU (Clip to [0, none])",
                                 node_label(node), text(b.min), text(b.max)));
}

void map_clip(const OnnxNode& node, ImportContext& ctx) {
  const bool six = is_relu6(clip_bounds(node, ctx));
  map_with(node, ctx, six ? AddLayer([](const OnnxNode&, ImportContext&, Blueprint& bp, const std::string& n) { bp.relu6(n); })
                          : AddLayer([](const OnnxNode&, ImportContext&, Blueprint& bp, const std::string& n) { bp.relu(n); }));
}

// ---- HardSigmoid: PyTorch's -------------------------------------------------------------------

void check_hard_sigmoid(const OnnxNode& node, ImportContext&, std::vector<std::string>& problems) {
  const float alpha = float_attribute(node, "alpha", 0.2f), beta = float_attribute(node, "beta", 0.5f);
  if (!(std::abs(alpha - 1.0 / 6.0) <= 1e-6 && std::abs(beta - 0.5) <= 1e-6))  // NaN included
    problems.push_back(fmt::format("{}: attributes alpha {} and beta {}; kiln's hardsigmoid is PyTorch's, "
                                   "relu6(x + 3) / 6 (alpha 1/6, beta 0.5)", node_label(node), alpha, beta));
}

// ---- Gelu (opset 20) ----------------------------------------------------------------------------

void check_gelu(const OnnxNode& node, ImportContext&, std::vector<std::string>& problems) {
  const std::string approximate = string_attribute(node, "approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    problems.push_back(attribute_problem(node, "approximate", "'" + approximate + "'",
                                         "kiln's GELU is exact ('none') or the tanh approximation ('tanh')"));
}

}  // namespace

const std::vector<OnnxOp> kActivationOps = {
    {"", "Relu", nullptr, nullptr,
     [](const OnnxNode& n, ImportContext& c) {
       map_with(n, c, [](const OnnxNode&, ImportContext&, Blueprint& bp, const std::string& name) { bp.relu(name); });
     }},
    {"", "Clip", nullptr, check_clip, map_clip},
    {"", "LeakyRelu", nullptr, nullptr,
     [](const OnnxNode& n, ImportContext& c) {
       map_with(n, c, [](const OnnxNode& node, ImportContext&, Blueprint& bp, const std::string& name) {
         bp.leaky_relu(float_attribute(node, "alpha", 0.01f), name);
       });
     }},
    {"", "Elu", nullptr, nullptr,
     [](const OnnxNode& n, ImportContext& c) {
       map_with(n, c, [](const OnnxNode& node, ImportContext&, Blueprint& bp, const std::string& name) {
         bp.elu(float_attribute(node, "alpha", 1.f), name);
       });
     }},
    {"", "Sigmoid", nullptr, nullptr,
     [](const OnnxNode& n, ImportContext& c) {
       map_with(n, c, [](const OnnxNode&, ImportContext&, Blueprint& bp, const std::string& name) { bp.sigmoid(name); });
     }},
    {"", "HardSigmoid", nullptr, check_hard_sigmoid,
     [](const OnnxNode& n, ImportContext& c) {
       map_with(n, c, [](const OnnxNode&, ImportContext&, Blueprint& bp, const std::string& name) { bp.hardsigmoid(name); });
     }},
    {"", "HardSwish", nullptr, nullptr,
     [](const OnnxNode& n, ImportContext& c) {
       map_with(n, c, [](const OnnxNode&, ImportContext&, Blueprint& bp, const std::string& name) { bp.hardswish(name); });
     }},
    {"", "Tanh", nullptr, nullptr,
     [](const OnnxNode& n, ImportContext& c) {
       map_with(n, c, [](const OnnxNode&, ImportContext&, Blueprint& bp, const std::string& name) { bp.tanh(name); });
     }},
    {"", "Gelu", nullptr, check_gelu,
     [](const OnnxNode& n, ImportContext& c) {
       map_with(n, c, [](const OnnxNode& node, ImportContext&, Blueprint& bp, const std::string& name) {
         bp.gelu(string_attribute(node, "approximate", "none") == "tanh", name);
       });
     }},
    // The patterns' nodes.
    {"kiln", "Silu", nullptr, nullptr,
     [](const OnnxNode& n, ImportContext& c) {
       map_with(n, c, [](const OnnxNode&, ImportContext&, Blueprint& bp, const std::string& name) { bp.silu(name); });
     }},
    {"kiln", "Hardswish", nullptr, nullptr,
     [](const OnnxNode& n, ImportContext& c) {
       map_with(n, c, [](const OnnxNode&, ImportContext&, Blueprint& bp, const std::string& name) { bp.hardswish(name); });
     }},
    {"kiln", "Gelu", nullptr, nullptr,
     [](const OnnxNode& n, ImportContext& c) {
       map_with(n, c, [](const OnnxNode&, ImportContext&, Blueprint& bp, const std::string& name) { bp.gelu(false, name); });
     }},
};

}  // namespace kiln::onnx_import
