// The layer_norm family's costs: its ops only move bytes (a few operations per element, far cheaper
// than the traffic; like BatchNorm's, they count no multiply-adds). The forward reads x, weight and
// bias and writes y and, in training, each row's mean and rstd. The backward reads dy, x, the
// weight and the saved statistics and writes the gradients wanted; its workspace (the GPU's
// partial sums, a few rows of 2C values per tile of rows) is scratch, not traffic the op must make.
#include "ops/layer_norm/layer_norm_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost layer_norm_bwd_cost(const Program& program, const Op& op) {
  const auto f = op_fields<LayerNormBackward>(op);
  double bytes = 0;
  for (TensorId t : {f.dy, f.x, f.weight, f.mean, f.rstd, f.dx, f.dweight, f.dbias}) bytes += tensor_bytes(program, t);
  return {0, bytes};
}

}  // namespace

namespace ops {
extern const OpCostTable layer_norm_op_costs;
const OpCostTable layer_norm_op_costs{
    {OpKind::LAYER_NORM_FWD, &memory_bound},
    {OpKind::LAYER_NORM_BWD, &layer_norm_bwd_cost},
};
}  // namespace ops
}  // namespace kiln
