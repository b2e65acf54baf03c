// The elementwise product, PyTorch's `a * b`: two maps of one shape, or a map and a per-channel
// gate N x 1 x 1 x C (adaptive_avgpool(1, 1)'s, PyTorch's (N, C, 1, 1)) broadcast over the map's
// height and width, the gate either input (torchvision's SqueezeExcitation writes `scale * input`).
// One MUL_FWD with the map as `a`; one MUL_BWD for both gradients, whichever of them are wanted.
// The backward reads both inputs, so the memory plan keeps them alive until it has run.
#include <string>

#include "compile/layer_def.h"
#include "ops/mul/mul_contract.h"

namespace kiln {
namespace {

bool is_gate_of(const Shape& gate, const Shape& map) {
  return gate.size() == 4 && map.size() == 4 && gate[0] == map[0] && gate[1] == 1 && gate[2] == 1 &&
         gate[3] == map[3];
}

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  if (inputs.size() != 2)
    fail("mul '{}': multiplies two inputs but reads {}; pass both to mul(a, b)", layer.name, inputs.size());
  const Shape& a = inputs[0];
  const Shape& b = inputs[1];
  const std::string given = fmt::format("its first input gives {} and its second {}", shape_str(a), shape_str(b));
  if (a.size() != 4 || b.size() != 4) {
    const Shape& map = a.size() == 4 ? a : b;
    const Shape& rows = a.size() == 4 ? b : a;
    if (map.size() == 4 && rows.size() == 2 && rows[0] == map[0] && rows[1] == map[3])
      fail("mul '{}': {}; an N x C gate (global_avgpool's rows) does not broadcast over a feature map: use "
           "adaptive_avgpool(1, 1) for the gate, whose N x 1 x 1 x C map (PyTorch's (N, C, 1, 1)) does",
           layer.name, given);
    fail("mul '{}': multiplies feature maps (N,H,W,C) but {}; multiply before flatten/fc", layer.name, given);
  }
  if (a == b) return a;
  if (is_gate_of(a, b)) return b;
  if (is_gate_of(b, a)) return a;
  const bool gate_like = (a[1] == 1 && a[2] == 1) || (b[1] == 1 && b[2] == 1);
  if (gate_like && a[0] == b[0])
    fail("mul '{}': {}; a per-channel gate N x 1 x 1 x C needs the map's channels: give the gate's last layer "
         "(its 1x1 conv) as many output channels as the map has",
         layer.name, given);
  fail("mul '{}': {}; it multiplies maps of one shape, or a map and a per-channel gate N x 1 x 1 x C: make the "
       "shapes equal (the same strides, padding and channels) or pool one to a gate with adaptive_avgpool(1, 1)",
       layer.name, given);
}

// The input that has the output's shape (the map; the first when both do), and the other.
struct Factors {
  int map, other;
};
Factors factors(const LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const bool first_is_map = ctx.layer(layer.inputs.at(0)).out_shape == layer.out_shape;
  return first_is_map ? Factors{0, 1} : Factors{1, 0};
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const Factors f = factors(ctx, index);
  const int y = ctx.activation(layer.name, layer.out_shape);
  ctx.forward(make_op(MulForward<TensorId>{ctx.in(index, f.map), ctx.in(index, f.other), y}, index));
  ctx.set_out(index, y);
  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(make_op(MulForward<TensorId>{ctx.infer_in(index, f.map), ctx.infer_in(index, f.other), yi}, index));
  ctx.set_infer_out(index, yi);
}

void lower_backward(LowerContext& ctx, int index) {
  const Factors f = factors(ctx, index);
  const int da = ctx.grad_in(index, f.map), db = ctx.grad_in(index, f.other);
  if (da < 0 && db < 0) return;
  ctx.backward(make_op(
      MulBackward<TensorId>{ctx.grad_out(index), ctx.in(index, f.map), ctx.in(index, f.other), da, db}, index));
}

}  // namespace

extern const LayerDef kMulLayer{LayerKind::Mul, infer, lower_forward, lower_backward};

}  // namespace kiln
