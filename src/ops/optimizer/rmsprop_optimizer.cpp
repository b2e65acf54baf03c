// RMSprop, as torch.optim.RMSprop (RmspropUpdate in optimizer_contract.h states the rule), the
// optimizer of MobileNet's and EfficientNet's recipes: its settings with PyTorch's defaults, its
// state (the square average always, the momentum buffer with momentum, the gradient average when
// centered) and its one fused RMSPROP_UPDATE over the whole parameter region.
#include "compile/optimizer_family.h"
#include "compile/optimizer_settings.h"
#include "ops/optimizer/optimizer_contract.h"

namespace kiln {
namespace {

constexpr const char* kName = "rmsprop";

const std::vector<Setting>& settings() {
  static const std::vector<Setting> rows = optimizer_rows(
      kName,
      {
          optimizer_real({.key = "alpha", .flag = "--alpha", .help = "the square average's decay (smoothing)",
                          .fix = "use e.g. --alpha 0.99 (PyTorch's) or 0.9 (TensorFlow's)",
                          .compared_on_resume = true},
                         0.99, {0, 1, false, true}),
          optimizer_real({.key = "eps", .flag = "--eps", .help = "added to the square average's square root",
                          .fix = "use e.g. --eps 1e-8", .compared_on_resume = true},
                         1e-8, {0, kUnbounded}),
          optimizer_momentum("momentum of the normalized steps (0: none)", 0),
          optimizer_switch({.key = "centered", .flag = "--centered",
                            .help = "normalize by the gradient's variance (the square average less the squared "
                                    "gradient average) rather than its second moment",
                            .compared_on_resume = true, .flag_pair = true},
                           false),
          optimizer_weight_decay("L2 penalty, added to the gradient"),
      });
  return rows;
}

void lower_update(LowerContext& ctx) {
  const Program& p = ctx.program;
  const OptimizerConfig& config = p.options.optimizer;
  RmspropUpdate<TensorId> rmsprop;
  bind_update_regions(p, rmsprop);
  rmsprop.alpha = float(optimizer_value(config, "alpha"));
  rmsprop.eps = float(optimizer_value(config, "eps"));
  rmsprop.weight_decay = float(optimizer_value(config, "weight_decay"));
  rmsprop.momentum = float(optimizer_value(config, "momentum"));
  rmsprop.centered = optimizer_value(config, "centered") != 0;
  rmsprop.square_avg = ctx.optimizer_state("optimizer.square_avg");
  if (rmsprop.momentum != 0) rmsprop.momentum_buffer = ctx.optimizer_state("optimizer.rmsprop_momentum_buffer");
  if (rmsprop.centered) rmsprop.grad_avg = ctx.optimizer_state("optimizer.grad_avg");
  ctx.update(make_op(rmsprop, -1));
}

}  // namespace

extern const OptimizerFamily kRmspropOptimizer{
    kName,
    "RMSprop (torch.optim.RMSprop)",
    settings,
    nullptr,
    lower_update,
    {"optimizer.square_avg", "optimizer.rmsprop_momentum_buffer", "optimizer.grad_avg"}};

}  // namespace kiln
