#include "kiln/compile.h"

#include "compile/lower_context.h"
#include "layers/layer_def.h"

namespace kiln {

Program lower(LayerGraph graph, const CompileOptions& options) {
  Program program;
  program.options = options;
  program.graph = std::move(graph);
  LowerContext ctx(program);
  const int n = int(program.graph.layers.size());
  for (int i = 0; i < n; ++i) layer_def(program.graph.layers[i].kind).lower_forward(ctx, i);

  // The loss closes the training forward; its gradient seeds backward at the last layer.
  const int last = n - 1;
  const Shape& logits_shape = program.graph.layers[last].out_shape;
  program.logits = ctx.out(last);
  program.tensors[program.logits].role = TensorRole::Output;
  program.inference_logits = ctx.infer_out(last);
  program.tensors[program.inference_logits].role = TensorRole::Output;
  TensorSpec labels;
  labels.name = "labels", labels.shape = {logits_shape[0]}, labels.dtype = DType::I32, labels.role = TensorRole::Label;
  program.label = ctx.add_tensor(labels);
  TensorSpec loss;
  loss.name = "loss", loss.shape = {1}, loss.dtype = ctx.act_dtype == DType::F64 ? DType::F64 : DType::F32;
  loss.role = TensorRole::Output;
  program.loss = ctx.add_tensor(loss);
  const int dlogits = ctx.activation("d:" + program.graph.layers[last].name, logits_shape);
  Op ce = ctx.op(OpKind::SOFTMAX_CE, last, {program.logits, program.label}, {program.loss, dlogits});
  ctx.forward(std::move(ce));
  ctx.set_loss_grad(last, dlogits);

  for (int i = last; i >= 1; --i) layer_def(program.graph.layers[i].kind).lower_backward(ctx, i);
  ctx.finish();
  return program;
}

Program compile(const Blueprint& blueprint, const CompileOptions& options) {
  LayerGraph graph = expand(blueprint, options);
  if (options.fuse_cbr) fuse_conv_bn_relu(graph);
  mark_first_layer(graph);
  check_target_limits(graph, options);
  return lower(std::move(graph), options);
}

}  // namespace kiln
