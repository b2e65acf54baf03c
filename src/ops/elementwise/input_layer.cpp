#include "compile/layer_def.h"
#include "ops/elementwise/elementwise_contract.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>&) { return layer.out_shape; }

// The data batch: written by the trainer before each step, read by both programs.
// A program with a loss is a whole network fed by a data loader, which delivers fp32 images: in
// mixed precision its input stays fp32 and one CAST on the device makes the fp16/bf16 copy the
// first layer reads (as autocast does inside the first convolution). A program without a loss is
// a block inside a network and reads its input in the compute dtype, as such a layer sees it.
void lower_forward(LowerContext& ctx, int index) {
  const bool cast_on_device = ctx.program.options.loss && ctx.mixed_precision();
  TensorSpec t;
  t.name = "input", t.shape = ctx.layer(index).out_shape;
  t.dtype = cast_on_device ? ctx.param_dtype : ctx.act_dtype;
  t.role = TensorRole::Input;
  const int id = ctx.add_tensor(std::move(t));
  ctx.program.input = id;
  int read = id;
  if (cast_on_device) {
    read = ctx.activation("input:compute", ctx.layer(index).out_shape);
    const Op cast = make_op(Cast<TensorId>{id, read}, index);
    ctx.forward(cast);
    ctx.inference(cast);
  }
  ctx.set_out(index, read);
  ctx.set_infer_out(index, read);
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
