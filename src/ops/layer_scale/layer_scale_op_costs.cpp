// The layer_scale family's costs: its ops only move bytes (one multiply, or one multiply-add, an
// element is far cheaper than the element's traffic), so they count no matrix arithmetic, as the
// other elementwise families. The forward reads x and gamma and writes y once each. The backward
// reads dy and x (dgamma's sums) and gamma only for dx, writes dx where wanted and dgamma; on the
// GPU its workspace is written by the first pass and read by the second (twice its bytes).
#include "ops/layer_scale/layer_scale_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost layer_scale_bwd_cost(const Program& program, const Op& op) {
  const auto f = op_fields<LayerScaleBackward>(op);
  double bytes = tensor_bytes(program, f.dy) + tensor_bytes(program, f.x) + tensor_bytes(program, f.dgamma);
  if (f.dx.present()) bytes += tensor_bytes(program, f.gamma) + tensor_bytes(program, f.dx);
  bytes += 2 * tensor_bytes(program, f.partials);  // 0 when absent (CPU programs)
  return {0, bytes};
}

}  // namespace

namespace ops {
extern const OpCostTable layer_scale_op_costs;
const OpCostTable layer_scale_op_costs{
    {OpKind::LAYER_SCALE_FWD, &memory_bound},
    {OpKind::LAYER_SCALE_BWD, &layer_scale_bwd_cost},
};
}  // namespace ops
}  // namespace kiln
