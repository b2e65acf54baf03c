// Channel concatenation, PyTorch's torch.cat(xs, dim=1) (NCHW's channel axis is NHWC's last):
// one CONCAT_FWD writes every input into its slice of y; the backward copies each input's slice
// of dy into its gradient (one CONCAT_BWD per input that wants one).
#include <string>

#include "compile/layer_def.h"
#include "ops/concat/concat_contract.h"

namespace kiln {
namespace {

std::string shapes_str(const std::vector<Shape>& inputs) {
  std::string out;
  for (size_t i = 0; i < inputs.size(); ++i) out += fmt::format("{}input {}: {}", i ? ", " : "", i, shape_str(inputs[i]));
  return out;
}

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  if (inputs.size() < 2)
    fail("concat '{}': joins two or more inputs but reads {}; pass every branch to concat({{a, b, ...}})", layer.name,
         inputs.size());
  for (const Shape& s : inputs)
    if (s.size() != 4)
      fail("concat '{}': joins feature maps (N,H,W,C) along their channels but is given {}; concatenate before "
           "flatten/fc",
           layer.name, shapes_str(inputs));
  Shape out = inputs[0];
  for (size_t i = 1; i < inputs.size(); ++i) {
    const Shape& s = inputs[i];
    if (s[0] != out[0] || s[1] != out[1] || s[2] != out[2])
      fail("concat '{}': its inputs need the same batch, height and width (N,H,W) but are {}; give the branches "
           "the same strides and padding (or pool the larger)",
           layer.name, shapes_str(inputs));
    out[3] += s[3];
  }
  return out;
}

std::vector<TensorId> inputs_of(LowerContext& ctx, int index, bool inference) {
  std::vector<TensorId> xs;
  for (size_t i = 0; i < ctx.layer(index).inputs.size(); ++i)
    xs.push_back(inference ? ctx.infer_in(index, int(i)) : ctx.in(index, int(i)));
  return xs;
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const int y = ctx.activation(layer.name, layer.out_shape);
  ctx.forward(make_op(ConcatForward<TensorId>{y, inputs_of(ctx, index, false)}, index));
  ctx.set_out(index, y);
  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(make_op(ConcatForward<TensorId>{yi, inputs_of(ctx, index, true)}, index));
  ctx.set_infer_out(index, yi);
}

void lower_backward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  int offset = 0;
  for (size_t i = 0; i < layer.inputs.size(); ++i) {
    const int channels = int(ctx.layer(layer.inputs[i]).out_shape[3]);
    const int dx = ctx.grad_in(index, int(i));
    if (dx >= 0) ctx.backward(make_op(ConcatBackward<TensorId>{ctx.grad_out(index), dx, offset}, index));
    offset += channels;
  }
}

}  // namespace

extern const LayerDef kConcatLayer{LayerKind::Concat, infer, lower_forward, lower_backward};

}  // namespace kiln
