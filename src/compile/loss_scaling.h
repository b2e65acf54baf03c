#pragma once
// Dynamic loss scaling in a compiled program (CompileOptions::loss_scaling; the ops are in
// src/ops/loss_scale/): the state tensors, the scaling of the loss gradient at the start of
// backward, and the check and scale update around the optimizer op.
#include "kiln/options.h"
#include "kiln/program.h"

namespace kiln {

class LowerContext;

// Whether a program compiled with `options` scales its loss (LossScaling::enabled, and only with
// a loss). A kiln::Error for settings out of range, or for scaling asked of a program without a
// loss.
bool loss_scaling_on(const CompileOptions& options);

// Declares the scaler's state (Program::loss_scale, loss_scale_clean_steps, found_nonfinite; the
// scale and the count are checkpointed with the buffers) and emits SCALE_LOSS_GRAD over
// `loss_grad`. Call before any backward op is emitted: it must be the first.
void lower_loss_scaling(LowerContext& ctx, int loss_grad);

// With the state declared: FIND_NONFINITE over the fp32 gradient region first in the update
// list, UPDATE_LOSS_SCALE last. Call after the optimizer op, which reads the scale and the flag,
// is in the list. Nothing without loss scaling.
void wrap_update_in_loss_scaling(Program& program);

}  // namespace kiln
