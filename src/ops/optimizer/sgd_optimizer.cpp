// SGD with momentum, as torch.optim.SGD with dampening 0 (optimizer_cpu.h states the rule): its
// settings, its momentum buffer and its one fused SGD_UPDATE over the whole parameter region.
#include "compile/optimizer_family.h"
#include "compile/optimizer_settings.h"
#include "ops/optimizer/optimizer_contract.h"

namespace kiln {
namespace {

constexpr const char* kName = "sgd";

const std::vector<Setting>& settings() {
  static const std::vector<Setting> rows = optimizer_rows(
      kName,
      {
          optimizer_momentum("momentum factor (0: plain SGD)", 0.9),
          optimizer_switch({.key = "nesterov", .flag = "--nesterov",
                            .help = "Nesterov momentum (needs a momentum > 0)", .compared_on_resume = true,
                            .flag_pair = true},
                           false),
          optimizer_weight_decay("L2 penalty, added to the gradient"),
      });
  return rows;
}

std::string refusal(const OptimizerConfig& config) {
  if (optimizer_value(config, "nesterov") != 0 && optimizer_value(config, "momentum") == 0)
    return "Nesterov momentum (--nesterov, CompileOptions::optimizer.values[\"nesterov\"]) needs a momentum > 0, as "
           "in PyTorch; use e.g. --momentum 0.9, or --no-nesterov for plain SGD";
  return "";
}

void lower_update(LowerContext& ctx) {
  const Program& p = ctx.program;
  const OptimizerConfig& config = p.options.optimizer;
  SgdUpdate<TensorId> sgd;
  bind_update_regions(p, sgd);
  sgd.momentum_buffer = ctx.optimizer_state("optimizer.momentum_buffer");
  sgd.momentum = float(optimizer_value(config, "momentum"));
  sgd.nesterov = optimizer_value(config, "nesterov") != 0;
  sgd.weight_decay = float(optimizer_value(config, "weight_decay"));
  ctx.update(make_op(sgd, -1));
}

}  // namespace

extern const OptimizerFamily kSgdOptimizer{kName, "SGD with momentum (torch.optim.SGD)", settings, refusal,
                                           lower_update, {"optimizer.momentum_buffer"}};

}  // namespace kiln
