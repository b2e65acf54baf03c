#include "layers/layer_def.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>&) { return layer.out_shape; }

// The data batch: written by the trainer before each step, read by both programs.
void lower_forward(LowerContext& ctx, int index) {
  TensorSpec t;
  t.name = "input", t.shape = ctx.layer(index).out_shape, t.dtype = ctx.act_dtype;
  t.role = TensorRole::Input;
  const int id = ctx.add_tensor(std::move(t));
  ctx.program.input = id;
  ctx.set_out(index, id);
  ctx.set_infer_out(index, id);
}

// Only asked for when CompileOptions::input_grad is set: the sum over the input's consumers.
void lower_backward(LowerContext& ctx, int index) {
  if (!ctx.program.options.input_grad) return;
  ctx.program.input_grad = ctx.grad_out(index);
  ctx.program.tensors[ctx.program.input_grad].role = TensorRole::Output;  // read after the step
}

}  // namespace

extern const LayerDef kInputLayer{LayerKind::Input, infer, lower_forward, lower_backward};

}  // namespace kiln
