// Conv and BatchNormalization: nn.Conv2d and nn.BatchNorm2d (or 1d over flat features), their
// weights as PyTorch stores them (ONNX's Conv weight is OIHW, as PyTorch's).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "import/onnx_op_table.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

std::string ints_text(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }

// ---- Conv -------------------------------------------------------------------------------------

// Whether the convolution has a bias to train: an input 2 that is not computed to zeros. The
// dynamo exporter writes nn.Conv2d(bias=False) with a bias of zeros expanded in the graph, which
// is no parameter of the PyTorch model (its state_dict has none).
bool has_bias(const OnnxNode& node, ImportContext& ctx) {
  const std::string& name = node.input(2);
  if (name.empty()) return false;
  if (ctx.stored(name)) return true;
  const Folded* f = ctx.constant(name);
  return !(f && f->floating && std::all_of(f->floats.begin(), f->floats.end(), [](double v) { return v == 0; }));
}

std::vector<std::string> conv_parameters(const OnnxNode& node, ImportContext& ctx) {
  std::vector<std::string> names = {node.input(1)};
  if (has_bias(node, ctx)) names.push_back(node.input(2));
  return names;
}

// The window attributes kiln's convolution takes: 2-D, positive strides and dilations, pads >= 0,
// explicit or VALID padding.
void check_window(const OnnxNode& node, std::vector<std::string>& problems, bool has_dilations) {
  const std::string auto_pad = string_attribute(node, "auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && !auto_pad.empty())
    problems.push_back(attribute_problem(node, "auto_pad", "'" + auto_pad + "'",
                                         "kiln takes explicit pads (NOTSET) or VALID; PyTorch's exporter writes pads"));
  auto pairs = [&](const char* name, int64_t least) {
    const OnnxAttribute* a = node.attribute(name);
    if (!a) return;
    bool bad = a->ints.size() != 2;
    for (int64_t v : a->ints) bad = bad || v < least;
    if (bad)
      problems.push_back(attribute_problem(node, name, ints_text(a->ints),
                                           fmt::format("kiln's 2-D windows take two values, each at least {}", least)));
  };
  pairs("strides", 1);
  if (has_dilations) pairs("dilations", 1);
  if (const OnnxAttribute* pads = node.attribute("pads")) {
    bool bad = pads->ints.size() != 4;
    for (int64_t v : pads->ints) bad = bad || v < 0;
    if (bad)
      problems.push_back(attribute_problem(node, "pads", ints_text(pads->ints),
                                           "kiln's 2-D windows take four paddings (top, left, bottom, right), none negative"));
  }
}

void check_conv(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const size_t before = problems.size();
  ctx.check_weight(node, 1, "its weight", problems);
  if (has_bias(node, ctx)) ctx.check_weight(node, 2, "its bias", problems);
  if (problems.size() > before) return;
  const OnnxTensor& w = *ctx.stored(node.input(1));
  if (w.dims.size() != 4) {
    problems.push_back(fmt::format("{}: its weight '{}' is {}, a {}-D convolution; kiln's are 2-D (OIHW weights)",
                                   node_label(node), w.name, shape_str(w.dims), int(w.dims.size()) - 2));
    return;
  }
  const int64_t group = int_attribute(node, "group", 1);
  if (group < 1 || w.dims[0] % group != 0)
    problems.push_back(attribute_problem(node, "group", std::to_string(group),
                                         fmt::format("it must be at least 1 and divide the {} output channels", w.dims[0])));
  const std::vector<int64_t> kernel = ints_attribute(node, "kernel_shape");
  if (!kernel.empty() && kernel != std::vector<int64_t>{w.dims[2], w.dims[3]})
    problems.push_back(attribute_problem(node, "kernel_shape", ints_text(kernel),
                                         fmt::format("its weight '{}' is {}: they must agree", w.name, shape_str(w.dims))));
  if (has_bias(node, ctx)) {
    const OnnxTensor& b = *ctx.stored(node.input(2));
    if (b.dims != Shape{w.dims[0]})
      problems.push_back(fmt::format("{}: its bias '{}' is {} but it has {} output channels", node_label(node), b.name,
                                     shape_str(b.dims), w.dims[0]));
  }
  check_window(node, problems, true);
}

// The BatchNormalization that alone reads `value`, or nullptr.
const OnnxNode* only_batch_norm_reader(const std::string& value, ImportContext& ctx) {
  const std::vector<int>& readers = ctx.readers(value);
  if (readers.size() != 1 || ctx.is_output(value)) return nullptr;
  const OnnxNode& r = ctx.nodes()[size_t(readers[0])];
  return r.domain.empty() && r.op_type == "BatchNormalization" && r.input(0) == value ? &r : nullptr;
}

void map_conv(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue& x = ctx.input(node, 0);
  const OnnxTensor& w = ctx.weight(node, 1, "its weight");
  if (x.form != Form::Map)
    fail("'{}': {} reads flat features (N, F); a convolution reads a feature map (N, C, H, W)", ctx.path(),
         node_label(node));
  const int64_t group = int_attribute(node, "group", 1);
  if (x.channels > 0 && x.channels != w.dims[1] * group)
    fail("'{}': {} has the weight '{}' of shape {} in {} group{}, for {} input channels, but its input has {}", ctx.path(),
         node_label(node), w.name, shape_str(w.dims), group, group == 1 ? "" : "s", w.dims[1] * group, x.channels);
  ConvAttrs a;
  a.out_channels = int(w.dims[0]);
  a.kernel_h = int(w.dims[2]), a.kernel_w = int(w.dims[3]);
  if (string_attribute(node, "auto_pad", "NOTSET") != "VALID") {
    if (const std::vector<int64_t> pads = ints_attribute(node, "pads"); pads.size() == 4)
      a.pad_top = int(pads[0]), a.pad_left = int(pads[1]), a.pad_bottom = int(pads[2]), a.pad_right = int(pads[3]);
  }
  if (const std::vector<int64_t> s = ints_attribute(node, "strides"); s.size() == 2) a.stride_h = int(s[0]), a.stride_w = int(s[1]);
  if (const std::vector<int64_t> d = ints_attribute(node, "dilations"); d.size() == 2)
    a.dilation_h = int(d[0]), a.dilation_w = int(d[1]);
  a.groups = int(group);
  // nn.Conv2d's own initialization, for a model trained from scratch (the file's weights replace it).
  a.init = WeightInit::torch_default();
  a.bias_init = BiasInit::TorchDefault;
  const std::string& name = ctx.layer_name(node);
  const OnnxTensor* bias = has_bias(node, ctx) ? &ctx.weight(node, 2, "its bias") : nullptr;
  if (bias && only_batch_norm_reader(node.outputs.at(0), ctx)) {
    ctx.fold_bias(node.outputs[0], {bias, name});
    bias = nullptr;
  }
  a.bias = bias != nullptr;
  ctx.from(x).conv(a, name);
  ctx.add_weight(node, name + ".weight", named_tensor(w));
  if (bias) ctx.add_weight(node, name + ".bias", named_tensor(*bias));
  ctx.produce(node, Form::Map, w.dims[0]);
}

// ---- BatchNormalization -------------------------------------------------------------------------

constexpr const char* kBnInputs[] = {"its scale", "its bias", "its running mean", "its running variance"};

std::vector<std::string> bn_parameters(const OnnxNode& node, ImportContext&) {
  return {node.input(1), node.input(2), node.input(3), node.input(4)};
}

void check_batch_norm(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const size_t before = problems.size();
  for (size_t k = 1; k <= 4; ++k) ctx.check_weight(node, k, kBnInputs[k - 1], problems);
  if (problems.size() > before) return;
  const Shape c = ctx.stored(node.input(1))->dims;
  for (size_t k = 1; k <= 4; ++k) {
    const OnnxTensor& t = *ctx.stored(node.input(k));
    if (t.dims.size() != 1 || t.dims != c)
      problems.push_back(fmt::format("{}: {} '{}' is {}; BatchNorm's four tensors are vectors of one length (the "
                                     "channels)", node_label(node), kBnInputs[k - 1], t.name, shape_str(t.dims)));
  }
  const float eps = float_attribute(node, "epsilon", 1e-5f);
  if (!(eps > 0.f))
    problems.push_back(attribute_problem(node, "epsilon", fmt::format("{}", eps), "kiln's BatchNorm needs eps > 0"));
  const float momentum = float_attribute(node, "momentum", 0.9f);
  if (!(momentum >= 0.f && momentum <= 1.f))
    problems.push_back(attribute_problem(node, "momentum", fmt::format("{}", momentum),
                                         "ONNX's momentum (the old statistics' weight) lies in [0, 1]"));
  if (int_attribute(node, "spatial", 1) != 1)
    problems.push_back(attribute_problem(node, "spatial", "0", "kiln normalizes each channel over N, H and W (spatial 1)"));
  // Training-mode exports (opset 14 and up) write the updated running statistics as outputs 1 and 2:
  // kiln keeps its own, so nothing may read them.
  for (size_t k = 1; k < node.outputs.size(); ++k)
    if (!node.outputs[k].empty() && (!ctx.readers(node.outputs[k]).empty() || ctx.is_output(node.outputs[k])))
      problems.push_back(fmt::format("{}: its output {} ('{}', the updated running statistics) is read by the graph; "
                                     "kiln updates BatchNorm's statistics itself and gives only the normalized map",
                                     node_label(node), k, node.outputs[k]));
}

// The running mean less the folded convolution bias, in double, stored in the wider of their dtypes.
NamedTensor mean_less_bias(const OnnxTensor& mean, const OnnxTensor& bias) {
  const std::vector<double> m = mean.values(), b = bias.values();
  NamedTensor t;
  t.name = mean.name;
  t.shape = mean.dims;
  const bool wide = mean.dtype == DType::F64 || bias.dtype == DType::F64;
  t.dtype = wide ? DType::F64 : DType::F32;
  t.data.resize(m.size() * dtype_size(t.dtype));
  for (size_t i = 0; i < m.size(); ++i) {
    const double v = m[i] - b.at(i);
    if (wide) std::memcpy(t.data.data() + i * 8, &v, 8);
    else {
      const float f = float(v);
      std::memcpy(t.data.data() + i * 4, &f, 4);
    }
  }
  return t;
}

void map_batch_norm(const OnnxNode& node, ImportContext& ctx) {
  const MappedValue& x = ctx.input(node, 0);
  const OnnxTensor& scale = ctx.weight(node, 1, kBnInputs[0]);
  const int64_t c = scale.dims.at(0);
  if (x.channels > 0 && x.channels != c)
    fail("'{}': {} normalizes {} channels (its scale '{}'), but its input has {}", ctx.path(), node_label(node), c,
         scale.name, x.channels);
  const std::string& name = ctx.layer_name(node);
  // PyTorch's momentum (the new batch's weight) from ONNX's (the old statistics'): exporters write
  // float32(1 - m), so 1 - 0.9f is 0.10000002, not PyTorch's 0.1; the shortest decimal whose
  // complement rounds to the file's value is the m that was written (0.1, 0.01, 0.0003).
  ctx.from(x).bn(name, decimal_attribute(node, "epsilon", 1e-5f),
                 torch_complement_decimal(float_attribute(node, "momentum", 0.9f)));
  const char* fields[] = {".weight", ".bias", ".running_mean", ".running_var"};
  for (size_t k = 1; k <= 4; ++k) {
    const OnnxTensor& t = ctx.weight(node, k, kBnInputs[k - 1]);
    const ImportContext::FoldedBias* folded = k == 3 ? ctx.folded_bias(node.input(0)) : nullptr;
    if (folded && folded->bias->dims != t.dims)
      fail("'{}': the bias '{}' of convolution '{}' has {} values but {} normalizes {} channels", ctx.path(),
           folded->bias->name, folded->conv, folded->bias->count(), node_label(node), c);
    ctx.add_weight(node, name + fields[k - 1], folded ? mean_less_bias(t, *folded->bias) : named_tensor(t));
    if (folded) ctx.folded_biases().push_back(folded->bias->name);
  }
  ctx.produce(node, x.form, c);
}

}  // namespace

const std::vector<OnnxOp> kConvOps = {
    {"", "Conv", conv_parameters, check_conv, map_conv},
    {"", "BatchNormalization", bn_parameters, check_batch_norm, map_batch_norm},
};

}  // namespace kiln::onnx_import
