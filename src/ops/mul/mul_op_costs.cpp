// The mul family's costs: its ops only move bytes (the multiplies are far cheaper than the
// traffic). The forward reads a and b and writes y once each. The backward reads dy once, and b
// only for da and a only for db (the op names both, but a gradient not wanted reads neither).
#include "ops/mul/mul_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost mul_bwd_cost(const Program& program, const Op& op) {
  const auto f = op_fields<MulBackward>(op);
  double bytes = tensor_bytes(program, f.dy);
  if (f.da.present()) bytes += tensor_bytes(program, f.b) + tensor_bytes(program, f.da);
  if (f.db.present()) bytes += tensor_bytes(program, f.a) + tensor_bytes(program, f.db);
  return {0, bytes};
}

}  // namespace

namespace ops {
extern const OpCostTable mul_op_costs;
const OpCostTable mul_op_costs{
    {OpKind::MUL_FWD, &memory_bound},
    {OpKind::MUL_BWD, &mul_bwd_cost},
};
}  // namespace ops
}  // namespace kiln
