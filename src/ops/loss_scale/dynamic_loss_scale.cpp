// Dynamic loss scaling in a compiled program (CompileOptions::loss_scaling, PyTorch's GradScaler):
// its settings' checks, its state, the scale the loss multiplies its gradient by, and the check
// and scale update around the optimizer's update (loss_scale_contract.h has the ops).
#include <cmath>

#include "compile/loss_scale_def.h"
#include "kiln/error.h"
#include "ops/loss_scale/loss_scale_contract.h"

namespace kiln {
namespace {

bool enabled(const CompileOptions& options) {
  const LossScaling& s = options.loss_scaling;
  if (!(s.init_scale > 0.f) || !std::isfinite(s.init_scale))
    fail("loss scaling: init_scale {} must be finite and > 0 (PyTorch's default is 65536)", s.init_scale);
  if (!(s.growth_factor > 1.f) || !std::isfinite(s.growth_factor))
    fail("loss scaling: growth_factor {} must be finite and > 1 (default 2)", s.growth_factor);
  if (!(s.backoff_factor > 0.f && s.backoff_factor < 1.f))
    fail("loss scaling: backoff_factor {} must lie in (0, 1) (default 0.5)", s.backoff_factor);
  if (s.growth_interval < 1) fail("loss scaling: growth_interval {} must be >= 1 (default 2000)", s.growth_interval);
  if (!options.loss) {
    // Without a loss the caller writes the output gradient; it would arrive unscaled.
    if (s.mode == LossScaleMode::Dynamic)
      fail("loss scaling needs a loss to scale: this program has none (CompileOptions::loss is false); turn "
           "loss scaling off or compile with the loss");
    return false;
  }
  return s.enabled(options.precision);
}

// The scale and the count of clean steps are checkpointed with the buffers; the flag is rewritten
// every step. The loss scales its gradient in fp32, before rounding it to the activations' dtype,
// so the whole backward runs on scaled gradients.
int declare_state(LowerContext& ctx) {
  Program& p = ctx.program;
  auto state = [&](const char* name, DType dtype, Init init, double value) {
    TensorSpec t;
    t.name = name, t.shape = {1}, t.dtype = dtype, t.role = TensorRole::Buffer;
    t.init = init, t.init_value = value;
    return ctx.add_tensor(std::move(t));
  };
  p.loss_scale = state("loss_scale", DType::F32, Init::Constant, p.options.loss_scaling.init_scale);
  p.loss_scale_clean_steps = state("loss_scale.clean_steps", DType::I32, Init::Zeros, 0);
  p.found_nonfinite = state("loss_scale.found_nonfinite", DType::I32, Init::Zeros, 0);
  p.buffers.push_back(p.loss_scale);
  p.buffers.push_back(p.loss_scale_clean_steps);
  return p.loss_scale;
}

// FIND_NONFINITE over every gradient the optimizer reads first in the update list (the fp32
// region and, in mixed precision, the compute dtype's; either may be absent, not both), so the
// update can skip the step; UPDATE_LOSS_SCALE last.
void wrap_update(LowerContext& ctx) {
  Program& p = ctx.program;
  FindNonFinite<TensorId> check{p.grad_region, p.found_nonfinite};
  check.compute_grads = p.compute_grad_region;
  p.update.insert(p.update.begin(), make_op(check, -1));
  UpdateLossScale<TensorId> rule{p.found_nonfinite, p.loss_scale, p.loss_scale_clean_steps};
  const LossScaling& s = p.options.loss_scaling;
  rule.growth_factor = s.growth_factor, rule.backoff_factor = s.backoff_factor;
  rule.growth_interval = s.growth_interval;
  p.update.push_back(make_op(rule, -1));
}

// The settings a user gives (the growth and backoff factors keep PyTorch's 2 and 0.5: the
// library's alone).
const std::vector<Setting>& settings() {
  using L = LossScaling;
  static const std::vector<Setting> rows = {
      choice_setting<L, LossScaleMode>({.key = "loss_scale",
                                        .flag = "--loss-scale",
                                        .help = "auto (dynamic for fp16, off otherwise), dynamic or off",
                                        .member = "CompileOptions::loss_scaling.mode"},
                                       &L::mode,
                                       {{"auto", LossScaleMode::Auto},
                                        {"dynamic", LossScaleMode::Dynamic},
                                        {"off", LossScaleMode::Off}}),
      real_setting<L>({.key = "loss_scale_init",
                       .flag = "--loss-scale-init",
                       .help = "initial loss scale, > 0",
                       .member = "CompileOptions::loss_scaling.init_scale",
                       .fix = "use e.g. --loss-scale-init 65536"},
                      &L::init_scale, {0, kUnbounded, true, false}),
      count_setting<L>({.key = "loss_scale_interval",
                        .flag = "--loss-scale-interval",
                        .help = "steps without inf/NaN gradients before the scale doubles, >= 1",
                        .member = "CompileOptions::loss_scaling.growth_interval",
                        .fix = "use e.g. --loss-scale-interval 2000"},
                       &L::growth_interval, {1, kUnbounded}),
  };
  return rows;
}

}  // namespace

extern const LossScaleDef kDynamicLossScale{"dynamic", enabled, declare_state, wrap_update, settings};

}  // namespace kiln
