// The activation layer's export: kiln's elementwise activations (activation_list.def) as ONNX opset
// 17 nodes. Those opset 17 lacks as one operator (SiLU, GELU, Mish: later opsets added them) are
// composed of the operators that are there, by the formulas of activation_functions.h. The switch
// has no default, so a new activation fails the build (-Wswitch) until it is written here. No
// parameters.
#include "ops/activation/activation_export.h"

#include "export/layer_export.h"
#include "kiln/error.h"

namespace kiln {

void write_activation(OnnxLayerWriter& out, Activation a, float alpha, const std::string& x, const std::string& y) {
  using A = onnx_export::Attribute;
  switch (a) {
    case Activation::ReLU6:
      out.node("Clip", {x, out.scalar(0.f), out.scalar(6.f)}, y);
      return;
    case Activation::LeakyReLU:
      out.node("LeakyRelu", {x}, y, {A::real("alpha", alpha)});
      return;
    case Activation::ELU:
      out.node("Elu", {x}, y, {A::real("alpha", alpha)});
      return;
    case Activation::SiLU:  // x * sigmoid(x)
      out.node("Mul", {x, out.node("Sigmoid", {x}, y + ":sigmoid")}, y);
      return;
    case Activation::Hardswish:  // x * relu6(x + 3) / 6
      out.node("HardSwish", {x}, y);
      return;
    case Activation::GELU: {  // x / 2 * (1 + erf(x / sqrt(2)))
      const std::string erf = out.node("Erf", {out.node("Mul", {x, out.scalar(0.70710678118654752440f)}, y + ":scaled")},
                                        y + ":erf");
      const std::string half_x = out.node("Mul", {x, out.scalar(0.5f)}, y + ":half_x");
      out.node("Mul", {half_x, out.node("Add", {erf, out.scalar(1.f)}, y + ":one_plus")}, y);
      return;
    }
    case Activation::GELUTanh: {  // x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))
      const std::string cube = out.node("Mul", {out.node("Mul", {x, x}, y + ":square"), x}, y + ":cube");
      const std::string inner =
          out.node("Add", {x, out.node("Mul", {cube, out.scalar(0.044715f)}, y + ":cubic_term")}, y + ":inner");
      const std::string t =
          out.node("Tanh", {out.node("Mul", {inner, out.scalar(0.79788456080286535588f)}, y + ":scaled")}, y + ":tanh");
      const std::string half_x = out.node("Mul", {x, out.scalar(0.5f)}, y + ":half_x");
      out.node("Mul", {half_x, out.node("Add", {t, out.scalar(1.f)}, y + ":one_plus")}, y);
      return;
    }
    case Activation::Sigmoid:
      out.node("Sigmoid", {x}, y);
      return;
    case Activation::Tanh:
      out.node("Tanh", {x}, y);
      return;
    case Activation::Mish:  // x * tanh(softplus(x))
      out.node("Mul", {x, out.node("Tanh", {out.node("Softplus", {x}, y + ":softplus")}, y + ":tanh")}, y);
      return;
    case Activation::Hardsigmoid:  // relu6(x + 3) / 6 = clip(x / 6 + 1 / 2, 0, 1)
      out.node("HardSigmoid", {x}, y, {A::real("alpha", 1.f / 6.f), A::real("beta", 0.5f)});
      return;
  }
  fail("activation {} has no ONNX form in kiln's exporter (src/ops/activation/activation_export.cpp)", int(a));
}

namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const ActivationAttrs& a = attrs_of<ActivationAttrs>(l);
  write_activation(out, a.activation, a.alpha, out.input(layer), l.name);
  return l.name;
}

}  // namespace

extern const LayerExport kActivationExport{LayerKind::Activation, onnx, nullptr};

}  // namespace kiln
