#include "kiln/compile.h"
#include "kiln/memory_plan.h"

#include "compile/op_streams.h"
#include "compile/lower_context.h"
#include "compile/layer_def.h"
#include "compile/loss_def.h"
#include "compile/loss_scale_def.h"
#include "compile/optimizer_family.h"

namespace kiln {
namespace {

// A frozen layer computes in training what it computes in inference: its lowering emits both, and
// the training forward takes the inference ops (BatchNorm on running statistics it leaves as they
// are, no dropout) in place of its own, writing the tensors the inference program reads. Those
// tensors then live from the training forward to the inference ops (the memory plan's lifetimes
// span every list), so neither program overwrites the other's.
void lower_frozen_forward(LowerContext& ctx, int index) {
  Program& p = ctx.program;
  const size_t forward_from = p.forward.size(), inference_from = p.inference.size();
  ctx.set_lowering_frozen(true);
  layer_def(p.graph.layers[index].kind).lower_forward(ctx, index);
  ctx.set_lowering_frozen(false);
  p.forward.resize(forward_from);
  p.forward.insert(p.forward.end(), p.inference.begin() + long(inference_from), p.inference.end());
  ctx.set_out(index, ctx.infer_out(index));
}

}  // namespace

Program lower(LayerGraph graph, const CompileOptions& options) {
  check_optimizer_config(options.optimizer);
  const LossScaleDef& scaling = loss_scale_def();
  const bool scale_loss = scaling.enabled(options);
  Program program;
  program.options = options;
  program.graph = std::move(graph);
  LowerContext ctx(program);
  const int n = int(program.graph.layers.size());
  for (int i = 0; i < n; ++i) {
    if (program.graph.layers[i].marks.frozen) lower_frozen_forward(ctx, i);
    else layer_def(program.graph.layers[i].kind).lower_forward(ctx, i);
  }

  const int last = n - 1;
  const Layer& out_layer = program.graph.layers[last];
  program.logits = ctx.out(last);
  program.tensors[program.logits].role = TensorRole::Output;
  program.inference_logits = ctx.infer_out(last);
  program.tensors[program.inference_logits].role = TensorRole::Output;
  if (options.loss) {
    // The loss closes the training forward; its gradient seeds backward at the last layer.
    ctx.set_loss_grad(last, loss_def().lower(ctx, last, scale_loss ? scaling.declare_state : nullptr));
  } else {
    TensorSpec grad;
    grad.name = "d:" + out_layer.name, grad.shape = out_layer.out_shape, grad.dtype = ctx.act_dtype;
    grad.role = TensorRole::OutputGrad;
    program.output_grad = ctx.add_tensor(std::move(grad));
    ctx.set_loss_grad(last, program.output_grad);
  }

  for (int i = last; i >= 0; --i)
    if (!program.graph.layers[i].marks.frozen) layer_def(program.graph.layers[i].kind).lower_backward(ctx, i);
  ctx.lay_out_parameters();
  optimizer_family(options.optimizer.name).lower_update(ctx);
  if (scale_loss) scaling.wrap_update(ctx);
  return program;
}

Program compile(const Blueprint& blueprint, const CompileOptions& options) {
  LayerGraph graph = expand(blueprint, options);
  if (options.fuse_cbr) {
    fuse_conv_bn_relu(graph, options);
    fuse_residual_tails(graph, options);
    fuse_conv_bn_activation(graph);
  }
  if (!options.input_grad) mark_first_layer(graph);
  if (!options.freeze.empty()) mark_frozen(graph, options.freeze);
  if (options.fuse_seams) {
    if (!options.fuse_cbr) fail("fusion across layers (--fuse-seams) fuses CBR layers; it cannot go with --no-fuse");
    mark_seams(graph);
  }
  check_target_limits(graph, options);
  Program program = lower(std::move(graph), options);
  place_op_streams(program);  // before the memory plan, which keeps overlapped ops' tensors live
  program.memory = plan_memory(program);
  return program;
}

}  // namespace kiln
