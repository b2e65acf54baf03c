#pragma once
// Dynamic loss scaling in a compiled program (CompileOptions::loss_scaling; the ops are in
// src/ops/loss_scale/): the state tensors, the scale SOFTMAX_CE multiplies its gradient by, and
// the check and scale update around the optimizer op.
#include "kiln/options.h"
#include "kiln/program.h"

namespace kiln {

class LowerContext;

// Whether a program compiled with `options` scales its loss (LossScaling::enabled, and only with
// a loss). A kiln::Error for settings out of range, or for scaling asked of a program without a
// loss.
bool loss_scaling_on(const CompileOptions& options);

// Declares the scaler's state (Program::loss_scale, loss_scale_clean_steps, found_nonfinite; the
// scale and the count are checkpointed with the buffers) and returns the scale, which the loss op
// reads (SoftmaxCrossEntropy::loss_scale): it scales the loss gradient in fp32, before rounding it
// to the activations' dtype, so the whole backward runs on scaled gradients.
int lower_loss_scaling(LowerContext& ctx);

// With the state declared: FIND_NONFINITE over the gradient regions (fp32, and the compute
// dtype's in mixed precision) first in the update
// list, UPDATE_LOSS_SCALE last. Call after the optimizer op, which reads the scale and the flag,
// is in the list. Nothing without loss scaling.
void wrap_update_in_loss_scaling(Program& program);

}  // namespace kiln
