// The concat family's costs: its ops only move bytes. The forward reads every input and writes y
// once (each tensor once); a backward copy reads its slice of dy only, as many bytes as it writes.
#include "runtime/op_cost.h"
#include "ops/concat/concat_contract.h"

namespace kiln {
namespace {

OpCost concat_bwd_cost(const Program& program, const Op& op) {
  const auto a = op_fields<ConcatBackward>(op);
  return {0, 2 * tensor_bytes(program, a.dx)};
}

}  // namespace

namespace ops {
extern const OpCostTable concat_op_costs;
const OpCostTable concat_op_costs{
    {OpKind::CONCAT_FWD, &memory_bound},
    {OpKind::CONCAT_BWD, &concat_bwd_cost},
};
}  // namespace ops
}  // namespace kiln
