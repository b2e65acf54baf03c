// LARS (You et al., 2017, as NVIDIA's and MLPerf's ResNet recipes run it; optimizer_contract.h
// states the rule): momentum SGD whose step for each parameter tensor is scaled by its trust ratio,
// for the large global batches of data-parallel runs. Its settings, its momentum buffer and its
// one LARS_UPDATE, which lists the parameter views: their bounds are the tensors of the ratio.
#include "compile/optimizer_family.h"
#include "compile/optimizer_settings.h"
#include "ops/optimizer/optimizer_contract.h"

namespace kiln {
namespace {

constexpr const char* kName = "lars";

const std::vector<Setting>& settings() {
  static const std::vector<Setting> rows = optimizer_rows(
      kName,
      {
          optimizer_momentum("momentum factor", 0.9),
          optimizer_real({.key = "trust_coefficient", .flag = "--lars-eta",
                          .help = "the LARS trust coefficient (eta) of trust = eta * ||w|| / (||g|| + weight_decay * "
                                  "||w||)",
                          .fix = "use e.g. --lars-eta 0.001", .compared_on_resume = true},
                         0.001, {0, kUnbounded, true}),
          optimizer_switch({.key = "lars_skip_1d", .flag = "--lars-skip-1d",
                            .help = "one-dimensional parameters (BatchNorm's scale and shift, biases) take plain "
                                    "momentum SGD steps, without trust ratio or weight decay, as in MLPerf's ResNet "
                                    "recipes; --no-lars-skip-1d gives them LARS steps too",
                            .compared_on_resume = true, .flag_pair = true},
                           true),
          optimizer_weight_decay("L2 penalty, added to the gradient inside the trust ratio"),
      });
  return rows;
}

void lower_update(LowerContext& ctx) {
  const Program& p = ctx.program;
  const OptimizerConfig& config = p.options.optimizer;
  LarsUpdate<TensorId> lars;
  bind_update_regions(p, lars);
  lars.momentum_buffer = ctx.optimizer_state("optimizer.lars_momentum_buffer");
  lars.momentum = float(optimizer_value(config, "momentum"));
  lars.weight_decay = float(optimizer_value(config, "weight_decay"));
  lars.trust_coefficient = float(optimizer_value(config, "trust_coefficient"));
  lars.skip_1d = optimizer_value(config, "lars_skip_1d") != 0;
  lars.tensors.assign(p.params.begin(), p.params.end());  // their views give the tensors' bounds
  // Without parameters (a program that trains nothing) there is no update to make.
  if (!lars.tensors.empty()) ctx.update(make_op(lars, -1));
}

}  // namespace

extern const OptimizerFamily kLarsOptimizer{kName,
                                            "LARS: momentum SGD scaled per parameter tensor by its trust ratio, for "
                                            "large batches",
                                            settings, nullptr, lower_update, {"optimizer.lars_momentum_buffer"}};

}  // namespace kiln
