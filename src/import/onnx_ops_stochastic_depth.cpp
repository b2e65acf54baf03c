// StochasticDepth: the kiln node made of torchvision's StochasticDepth(p, "row") in two forms, as
// kiln's stochastic_depth layer, which drops whole samples of the residual branch in training and is
// the identity in evaluation:
// - a training-mode export's per-sample Bernoulli mask, which the layout patterns recognize
//   (import/onnx_layout_patterns.h; attribute p);
// - kiln's own export's Identity node listed in the metadata (ops/elementwise/stochastic_depth_onnx.h),
//   rewritten here (attributes p and mode).
#include "import/onnx_stochastic_depth.h"

#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "import/onnx_op_table.h"
#include "import/onnx_patterns.h"
#include "kiln/error.h"
#include "ops/elementwise/stochastic_depth_onnx.h"

namespace kiln::onnx_import {
namespace {

void check_stochastic_depth(const OnnxNode& node, ImportContext&, std::vector<std::string>& problems) {
  const float p = float_attribute(node, "p", 0.f);
  if (!(p >= 0.f && p < 1.f))
    problems.push_back(fmt::format("{}: it keeps each sample with probability {}; kiln's stochastic depth drops "
                                   "with a probability in [0, 1)", node_label(node), 1.f - p));
}

// The attribute kiln's metadata entry leaves beside p: its double, written as text (a float
// attribute would round it).
constexpr const char* kExactP = "p_double";

// PyTorch's p: the metadata's double where the node came from kiln's export, else the decimal of the
// pattern's float32 attribute.
double drop_probability(const OnnxNode& node) {
  const OnnxAttribute* exact = node.attribute(kExactP);
  return exact ? std::strtod(exact->s.c_str(), nullptr) : decimal_attribute(node, "p", 0.f);
}

void map_stochastic_depth(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue x = ctx.input(node, 0);
  const double p = drop_probability(node);
  // A mask that drops nothing is no layer; but kiln's export lists its layers of p = 0 too
  // (ConvNeXt's first block), and those come back, so the layer list is the exported model's.
  const bool listed_by_kiln = node.attribute("mode") != nullptr;
  if (p == 0 && !listed_by_kiln) {
    ctx.set(node.outputs.at(0), x);
    return;
  }
  ctx.from(x).stochastic_depth(p, ctx.layer_name(node));
  ctx.produce(node, x.form, x.channels, x.one_by_one);
}

OnnxAttribute float_attr(const char* name, float value) {
  OnnxAttribute a;
  a.name = name;
  a.type = OnnxAttribute::Type::Float;
  a.f = value;
  return a;
}

OnnxAttribute string_attr(const char* name, std::string value) {
  OnnxAttribute a;
  a.name = name;
  a.type = OnnxAttribute::Type::String;
  a.s = std::move(value);
  return a;
}

// A JSON value as a message shows it: short, and printable whatever its strings hold.
std::string shown(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// What a name the entry lists is in the file, where it is no Identity node computing the output.
std::string what_node(const std::string& name, const OnnxModel& model) {
  for (const OnnxNode& n : model.nodes)
    if (n.name == name)
      return n.domain.empty() && n.op_type == "Identity" ? "an Identity node the output does not depend on"
                                                          : fmt::format("a {} node, not an Identity", n.op_type);
  return "no node of the graph";
}

}  // namespace

void recognize_exported_stochastic_depth(std::vector<OnnxNode>& nodes, const OnnxModel& model) {
  const auto listed = model.metadata.find(kStochasticDepthMetadataKey);
  if (listed == model.metadata.end()) return;
  const std::string key = kStochasticDepthMetadataKey;
  const std::string fix = fmt::format(
      "kiln's exporter writes {{\"<Identity node>\": {{\"p\": <drop probability in [0, 1)>, \"mode\": \"{}\"}}}}: "
      "correct the entry, export the model again (kiln export --onnx), or remove the metadata key '{}' to import "
      "its Identity nodes as the identity, without stochastic depth", kStochasticDepthRowMode, key);
  const nlohmann::json entries = nlohmann::json::parse(listed->second, nullptr, /*allow_exceptions=*/false);
  if (!entries.is_object())
    fail("'{}': its metadata '{}' is {}, not a JSON object; {}", model.path, key,
         entries.is_discarded() ? "not JSON" : fmt::format("the JSON {}", shown(entries)), fix);
  std::map<std::string, OnnxNode*> identities;
  for (OnnxNode& n : nodes)
    if (n.domain.empty() && n.op_type == "Identity" && !n.name.empty()) identities[n.name] = &n;
  for (const auto& [name, entry] : entries.items()) {
    const std::string where = fmt::format("'{}': its metadata '{}' lists '{}'", model.path, key, name);
    if (!entry.is_object()) fail("{} as {}, not an object with p and mode; {}", where, shown(entry), fix);
    const auto p = entry.find("p");
    if (p == entry.end() || !p->is_number())
      fail("{} with {}; {}", where, p == entry.end() ? "no p" : "p " + shown(*p) + ", not a number", fix);
    // In range as a double first: a double beyond float's range has no float conversion.
    const double wanted = p->get<double>();
    const float drop = wanted >= 0 && wanted < 1 ? float(wanted) : 1.f;
    if (!(drop < 1.f))  // 1 - 1e-9 rounds to 1 as a float
      fail("{} with p {}; kiln's stochastic depth drops a sample with a probability in [0, 1): {}", where, shown(*p), fix);
    const auto mode = entry.find("mode");
    if (mode == entry.end() || !mode->is_string() || mode->get<std::string>() != kStochasticDepthRowMode)
      fail("{} with mode {}; kiln's stochastic depth is torchvision's \"{}\" mode (one draw per sample): {}", where,
           mode == entry.end() ? "missing" : shown(*mode), kStochasticDepthRowMode, fix);
    const auto node = identities.find(name);
    if (node == identities.end()) fail("{}, which is {}; {}", where, what_node(name, model), fix);
    OnnxNode& n = *node->second;
    n.domain = kKilnDomain;
    n.op_type = "StochasticDepth";
    // A float32's value is PyTorch's decimal (files of kiln's float-p exports); a double is kiln's own p.
    n.attributes = {float_attr("p", drop), string_attr("mode", kStochasticDepthRowMode),
                    string_attr(kExactP, fmt::format("{}", torch_decimal_of(wanted)))};
  }
}

const std::vector<OnnxOp> kStochasticDepthOps = {
    {kKilnDomain, "StochasticDepth", nullptr, check_stochastic_depth, map_stochastic_depth},
};

}  // namespace kiln::onnx_import
