// The group_norm family's costs: its ops only move bytes (a handful of operations an element, far
// cheaper than the traffic). Each reads and writes its tensors once, the floor of a kernel that
// keeps a group's statistics on chip; the GPU's workspace of partial sums is scratch that such a
// kernel would not need, so it is not counted. The backward's input gradient counts only where
// the input wants one.
#include "ops/group_norm/group_norm_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost forward_cost(const Program& program, const Op& op) {
  const auto f = op_fields<GroupNormForward>(op);
  return {0, each_tensor_once(program, op) - tensor_bytes(program, f.workspace)};
}

OpCost backward_cost(const Program& program, const Op& op) {
  const auto f = op_fields<GroupNormBackward>(op);
  return {0, each_tensor_once(program, op) - tensor_bytes(program, f.workspace)};
}

}  // namespace

namespace ops {
extern const OpCostTable group_norm_op_costs;
const OpCostTable group_norm_op_costs{
    {OpKind::GROUP_NORM_FWD, &forward_cost},
    {OpKind::GROUP_NORM_BWD, &backward_cost},
};
}  // namespace ops
}  // namespace kiln
