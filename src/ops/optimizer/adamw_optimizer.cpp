// AdamW, as torch.optim.AdamW (optimizer_cpu.h states the rule): its settings, its two moment
// regions and its one fused ADAMW_UPDATE over the whole parameter region.
#include "compile/optimizer_family.h"
#include "compile/optimizer_settings.h"
#include "ops/optimizer/optimizer_contract.h"

namespace kiln {
namespace {

constexpr const char* kName = "adamw";

const std::vector<Setting>& settings() {
  static const std::vector<Setting> rows = optimizer_rows(
      kName,
      {
          optimizer_real({.key = "beta1", .help = "the first moment's decay", .compared_on_resume = true}, 0.9,
                         {0, 1, false, true}),
          optimizer_real({.key = "beta2", .help = "the second moment's decay", .compared_on_resume = true}, 0.999,
                         {0, 1, false, true}),
          optimizer_real({.key = "eps", .flag = "--eps", .help = "added to the second moment's square root",
                          .fix = "use e.g. --eps 1e-8", .compared_on_resume = true},
                         1e-8, {0, kUnbounded}),
          optimizer_weight_decay("decoupled: the weights shrink by lr x weight_decay each step"),
      });
  return rows;
}

void lower_update(LowerContext& ctx) {
  const Program& p = ctx.program;
  const OptimizerConfig& config = p.options.optimizer;
  AdamWUpdate<TensorId> adamw;
  bind_update_regions(p, adamw);
  adamw.exp_avg = ctx.optimizer_state("optimizer.exp_avg");
  adamw.exp_avg_sq = ctx.optimizer_state("optimizer.exp_avg_sq");
  adamw.beta1 = float(optimizer_value(config, "beta1"));
  adamw.beta2 = float(optimizer_value(config, "beta2"));
  adamw.eps = float(optimizer_value(config, "eps"));
  adamw.weight_decay = float(optimizer_value(config, "weight_decay"));
  ctx.update(make_op(adamw, -1));
}

}  // namespace

extern const OptimizerFamily kAdamwOptimizer{kName, "Adam with decoupled weight decay (torch.optim.AdamW)", settings,
                                             nullptr, lower_update, {"optimizer.exp_avg", "optimizer.exp_avg_sq"}};

}  // namespace kiln
