#include "import/onnx_op_table.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>

namespace kiln::onnx_import {

const OnnxOp* find_onnx_op(const OnnxNode& node) {
  static const std::map<std::pair<std::string, std::string>, const OnnxOp*> table = [] {
    std::map<std::pair<std::string, std::string>, const OnnxOp*> t;
    for (const std::vector<OnnxOp>* family : {&kConvOps, &kActivationOps, &kPoolOps, &kJoinOps, &kHeadOps, &kPlumbingOps,
                                              &kChannelOps, &kLayerNormOps, &kLayerScaleOps, &kAdaptivePoolOps,
                                              &kGroupNormOps, &kStochasticDepthOps,
                                              &kLinearOverMapOps, &kAsStridedOps, &kSplitOps})
      for (const OnnxOp& op : *family) t[{op.domain, op.op_type}] = &op;
    return t;
  }();
  const auto it = table.find({node.domain, node.op_type});
  return it == table.end() ? nullptr : it->second;
}

std::string unsupported_op_hint(const OnnxNode& node) {
  static const std::map<std::string, std::string> hints = {
      {"Softmax", "kiln trains on logits (its loss applies the softmax): export the model without its softmax"},
      {"LogSoftmax", "kiln trains on logits (its loss applies the softmax): export the model without it"},
      {"Transpose", "kiln reads permutes only as channel shuffle's Reshape -> Transpose (0, 2, 1, 3, 4) -> Reshape and "
                    "LayerNorm's Transpose (0, 2, 3, 1) -> LayerNormalization -> Transpose (0, 3, 1, 2)"},
      {"Pad", "kiln reads Pad only as more padding of the one Conv, MaxPool or AveragePool reading it: constant pads of "
              "the height and width, padding with 0 before a Conv or an AveragePool counting its padding, with -inf "
              "before a MaxPool, a pooling's padding coming out the same on all four sides. timm's padding='same' "
              "computes its pads from the input's shape under the TorchScript exporter: export with "
              "torch.onnx.export(..., dynamo=True, optimize=False), which writes them as constants"},
      {"ConvTranspose", "kiln has no transposed convolution"},
      {"Upsample", "kiln has no upsampling layer"},
      {"Resize", "kiln has no resizing layer"},
      {"Div", "kiln has no division layer (x / sqrt(2) is read inside the Erf form of GELU only)"},
      {"Erf", "Erf is read only inside the form of GELU x * 0.5 * (1 + Erf(x / sqrt(2)))"},
      {"Sub", "kiln has no subtraction layer"},
      {"Softplus", "kiln has no softplus layer (Mish, x * tanh(softplus(x)), is not imported yet)"},
      {"InstanceNormalization", "kiln has no instance normalization; it reads InstanceNormalization only in GroupNorm's "
                                "Reshape (0, g, -1) -> InstanceNormalization -> Reshape -> Mul -> Add"},
      {"GlobalMaxPool", "kiln has global average pooling only"},
      {"GatherND", "kiln has no gather layer. torch.onnx.export(dynamo=True) writes AdaptiveAvgPool2d(output_size) so "
                   "(Range and Floor index arithmetic, GatherND, ReduceMean) where the feature map's height or width is "
                   "not a multiple of output_size, as vgg's (7, 7) and alexnet's (6, 6) pooling at inputs under "
                   "224x224 (a 2x2 or 1x1 map spread to 7x7 or 6x6); export at an input size where it is one (224x224 "
                   "for vgg and alexnet), which it writes as an AveragePool"},
  };
  if (!node.domain.empty())
    return fmt::format("operators of domain '{}' are not ONNX's own; kiln reads ONNX's (export without custom ops)",
                       node.domain);
  const auto it = hints.find(node.op_type);
  return it != hints.end() ? it->second
                           : std::string("kiln has no layer for it (the operators kiln reads: kiln/onnx_import.h)");
}

int64_t int_attribute(const OnnxNode& node, const char* name, int64_t fallback) {
  const OnnxAttribute* a = node.attribute(name);
  return a ? a->i : fallback;
}

float float_attribute(const OnnxNode& node, const char* name, float fallback) {
  const OnnxAttribute* a = node.attribute(name);
  return a ? a->f : fallback;
}

double torch_decimal(float stored) {
  if (!std::isfinite(stored)) return stored;
  // fmt writes a float as the shortest decimal that reads back as that float (Dragonbox).
  return std::strtod(fmt::format("{}", stored).c_str(), nullptr);
}

double torch_decimal_of(double stored) {
  const bool float_value = std::isfinite(stored) && std::abs(stored) <= std::numeric_limits<float>::max() &&
                           double(float(stored)) == stored;
  return float_value ? torch_decimal(float(stored)) : stored;
}

double decimal_attribute(const OnnxNode& node, const char* name, float fallback) {
  return torch_decimal(float_attribute(node, name, fallback));
}

double torch_complement_decimal(float stored) {
  const double d = 1.0 - double(stored);
  for (int digits = 1; digits <= 9; ++digits) {
    const double scale = std::pow(10.0, digits);
    const double decimal = std::round(d * scale) / scale;
    if (float(1.0 - decimal) == stored) return decimal;
  }
  return d;
}

std::vector<int64_t> ints_attribute(const OnnxNode& node, const char* name) {
  const OnnxAttribute* a = node.attribute(name);
  return a ? a->ints : std::vector<int64_t>{};
}

std::string string_attribute(const OnnxNode& node, const char* name, const std::string& fallback) {
  const OnnxAttribute* a = node.attribute(name);
  return a ? a->s : fallback;
}

std::string attribute_problem(const OnnxNode& node, const char* name, const std::string& value,
                              const std::string& supported) {
  return fmt::format("{}: attribute '{}' is {}; {}", node_label(node), name, value, supported);
}

}  // namespace kiln::onnx_import
