#pragma once
// A seam consumer's scratch for its applied input (fusion across layers, src/compile/seams.cpp),
// shared by the layers that can consume a seam (cbr, conv_bn).
#include <string>

#include "compile/lower_context.h"

namespace kiln {

// Scratch of the consumer's input shape, where the backend convolves a materialized input (the
// CPU's: relu(x * scale + shift) is written there first, for one op); absent on the GPU, whose
// kernels are to apply scale and shift as they load the input.
inline TensorId seam_scratch(LowerContext& ctx, int consumer, const char* suffix) {
  if (ctx.program.options.device != Device::CPU) return TensorId();
  const Layer& layer = ctx.layer(consumer);
  return ctx.activation(layer.name + suffix, ctx.layer(layer.inputs[0]).out_shape);
}

}  // namespace kiln
