#pragma once
// A seam consumer's scratch for its applied input (fusion across layers, src/compile/seams.cpp),
// shared by the layers that can consume a seam (cbr, conv_bn).
#include <string>

#include "compile/lower_context.h"

namespace kiln {

// Scratch of the consumer's input shape, live for one op (and, in the backward, beside the next
// one where wgrad runs on the GPU's side stream): where relu(x * scale + shift) is written when a
// backend convolves a materialized input: the CPU always; the GPU in the backward's wgrad and,
// where cuDNN's prologue graph does not build or loses, in the forward.
inline TensorId seam_scratch(LowerContext& ctx, int consumer, const char* suffix) {
  const Layer& layer = ctx.layer(consumer);
  return ctx.activation(layer.name + suffix, ctx.layer(layer.inputs[0]).out_shape);
}

}  // namespace kiln
