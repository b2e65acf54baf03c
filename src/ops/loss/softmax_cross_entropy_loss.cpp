// Softmax cross-entropy with label smoothing (PyTorch's definition, loss_contract.h) closing the
// training forward, and the counts the trainer reads instead of the logits: the top-1 and top-5
// hits of the training step and of an inference batch, and their running totals with the loss.
#include "compile/loss_def.h"
#include "ops/loss/loss_contract.h"

namespace kiln {
namespace {

int output_tensor(LowerContext& ctx, const char* name, Shape shape, DType dtype) {
  TensorSpec t;
  t.name = name, t.shape = std::move(shape), t.dtype = dtype, t.role = TensorRole::Output;
  return ctx.add_tensor(std::move(t));
}

int lower(LowerContext& ctx, int last, int (*declare_scale)(LowerContext& ctx)) {
  Program& program = ctx.program;
  const Layer& out_layer = ctx.layer(last);
  TensorSpec labels;
  labels.name = "labels", labels.shape = {out_layer.out_shape[0]}, labels.dtype = DType::I32;
  labels.role = TensorRole::Label;
  program.label = ctx.add_tensor(labels);
  program.loss = output_tensor(ctx, "loss", {1}, ctx.act_dtype == DType::F64 ? DType::F64 : DType::F32);
  SoftmaxCrossEntropy<TensorId> ce;
  ce.logits = program.logits, ce.labels = program.label, ce.loss = program.loss;
  ce.dlogits = ctx.activation("d:" + out_layer.name, out_layer.out_shape);
  ce.label_smoothing = program.options.label_smoothing;
  // The backward runs on the scaled gradient; the loss the trainer reads stays unscaled.
  if (declare_scale) ce.loss_scale = declare_scale(ctx);
  ctx.forward(make_op(ce, last));
  // Top-1 and top-5 hits of the training step and of an inference batch, counted where the
  // logits are: the trainer reads two int32 instead of the logits.
  program.train_correct = output_tensor(ctx, "correct", {kCorrectSlots}, DType::I32);
  ctx.forward(make_op(CountCorrect<TensorId>{program.logits, program.label, program.train_correct}, last));
  program.inference_correct = output_tensor(ctx, "correct:inf", {kCorrectSlots}, DType::I32);
  // Last in the inference list: every layer's inference ops are emitted by now.
  ctx.inference(
      make_op(CountCorrect<TensorId>{program.inference_logits, program.label, program.inference_correct}, last));
  program.train_totals = output_tensor(ctx, "totals", {kTotalsSlots}, DType::F64);
  ctx.forward(make_op(AccumulateTotals<TensorId>{program.loss, program.train_correct, program.train_totals}, last));
  program.inference_totals = output_tensor(ctx, "totals:inf", {kTotalsSlots}, DType::F64);
  ctx.inference(make_op(AccumulateTotals<TensorId>{-1, program.inference_correct, program.inference_totals}, last));
  return ce.dlogits;
}

}  // namespace

extern const LossDef kSoftmaxCrossEntropyLoss{"softmax_cross_entropy", lower};

}  // namespace kiln
