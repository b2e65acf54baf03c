#pragma once
// A seam consumer's input in the lowering (fusion across layers, src/compile/seams.cpp), shared by
// the layers that can consume a seam: cbr and conv_bn, whose contracts name these fields alike
// (x, in_scale, in_shift, x_applied).
#include "compile/lower_context.h"

namespace kiln {

// Scratch of the consumer's input shape, live for one op (and, in the backward, beside the next
// one where wgrad runs on the GPU's side stream): where a backend writes relu(x * scale + shift)
// before convolving it.
inline TensorId seam_scratch(LowerContext& ctx, int consumer, const char* suffix) {
  const Layer& layer = ctx.layer(consumer);
  return ctx.activation(layer.name + suffix, ctx.layer(layer.inputs[0]).out_shape);
}

// The forward's input: the layer's own, or, where the layer consumes a seam, its producer's
// convolution output with the producer's scale and shift, and the scratch for the applied input.
template <class Forward>
void lower_seam_input(LowerContext& ctx, int consumer, Forward& f) {
  const Layer& layer = ctx.layer(consumer);
  f.x = ctx.in(consumer, 0);
  if (!layer.marks.seam_in) return;
  const LowerContext::SeamOutput& producer = ctx.seam_output(layer.inputs[0]);
  f.x = producer.conv_out, f.in_scale = producer.scale, f.in_shift = producer.shift;
  f.x_applied = seam_scratch(ctx, consumer, ":x_applied");
}

// The backward's: the forward's input, scale and shift, and a scratch of its own for the applied
// input that wgrad reads.
template <class Forward, class Backward>
void lower_seam_input_backward(LowerContext& ctx, int consumer, const Forward& f, Backward& b) {
  b.x = f.x;
  if (!ctx.layer(consumer).marks.seam_in) return;
  b.in_scale = f.in_scale, b.in_shift = f.in_shift;
  b.x_applied = seam_scratch(ctx, consumer, ":x_applied_bwd");
}

}  // namespace kiln
