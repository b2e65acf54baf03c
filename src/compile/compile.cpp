#include "kiln/compile.h"
#include "kiln/memory_plan.h"

#include "compile/loss_scaling.h"
#include "compile/op_streams.h"
#include "compile/lower_context.h"
#include "compile/layer_def.h"
#include "compile/optimizer_family.h"
#include "ops/loss/loss_contract.h"

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
  const bool scale_loss = loss_scaling_on(options);
  Program program;
  program.options = options;
  program.graph = std::move(graph);
  LowerContext ctx(program);
  const int n = int(program.graph.layers.size());
  for (int i = 0; i < n; ++i) {
    if (program.graph.layers[i].attrs.frozen) lower_frozen_forward(ctx, i);
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
    TensorSpec labels;
    labels.name = "labels", labels.shape = {out_layer.out_shape[0]}, labels.dtype = DType::I32;
    labels.role = TensorRole::Label;
    program.label = ctx.add_tensor(labels);
    TensorSpec loss;
    loss.name = "loss", loss.shape = {1}, loss.dtype = ctx.act_dtype == DType::F64 ? DType::F64 : DType::F32;
    loss.role = TensorRole::Output;
    program.loss = ctx.add_tensor(loss);
    SoftmaxCrossEntropy<TensorId> ce;
    ce.logits = program.logits, ce.labels = program.label, ce.loss = program.loss;
    ce.dlogits = ctx.activation("d:" + out_layer.name, out_layer.out_shape);
    ce.label_smoothing = options.label_smoothing;
    // The backward runs on the scaled gradient; the loss the trainer reads stays unscaled.
    if (scale_loss) ce.loss_scale = lower_loss_scaling(ctx);
    ctx.forward(make_op(ce, last));
    ctx.set_loss_grad(last, ce.dlogits);
    // Top-1 and top-5 hits of the training step and of an inference batch, counted where the
    // logits are: the trainer reads two int32 instead of the logits.
    auto count_tensor = [&](const char* name) {
      TensorSpec correct;
      correct.name = name, correct.shape = {kCorrectSlots}, correct.dtype = DType::I32;
      correct.role = TensorRole::Output;
      return ctx.add_tensor(std::move(correct));
    };
    program.train_correct = count_tensor("correct");
    ctx.forward(make_op(CountCorrect<TensorId>{program.logits, program.label, program.train_correct}, last));
    program.inference_correct = count_tensor("correct:inf");
    // Last in the inference list: every layer's inference ops are emitted by now.
    ctx.inference(
        make_op(CountCorrect<TensorId>{program.inference_logits, program.label, program.inference_correct}, last));
    auto totals_tensor = [&](const char* name) {
      TensorSpec totals;
      totals.name = name, totals.shape = {kTotalsSlots}, totals.dtype = DType::F64;
      totals.role = TensorRole::Output;
      return ctx.add_tensor(std::move(totals));
    };
    program.train_totals = totals_tensor("totals");
    ctx.forward(make_op(AccumulateTotals<TensorId>{program.loss, program.train_correct, program.train_totals}, last));
    program.inference_totals = totals_tensor("totals:inf");
    ctx.inference(make_op(AccumulateTotals<TensorId>{-1, program.inference_correct, program.inference_totals}, last));
  } else {
    TensorSpec grad;
    grad.name = "d:" + out_layer.name, grad.shape = out_layer.out_shape, grad.dtype = ctx.act_dtype;
    grad.role = TensorRole::OutputGrad;
    program.output_grad = ctx.add_tensor(std::move(grad));
    ctx.set_loss_grad(last, program.output_grad);
  }

  for (int i = last; i >= 0; --i)
    if (!program.graph.layers[i].attrs.frozen) layer_def(program.graph.layers[i].kind).lower_backward(ctx, i);
  ctx.lay_out_parameters();
  optimizer_family(options.optimizer.name).lower_update(ctx);
  wrap_update_in_loss_scaling(program);
  return program;
}

Program compile(const Blueprint& blueprint, const CompileOptions& options) {
  LayerGraph graph = expand(blueprint, options);
  if (options.fuse_cbr) {
    fuse_conv_bn_relu(graph);
    fuse_residual_tails(graph);
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
