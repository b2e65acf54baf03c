// BN_ACT's costs, the floors of its memory passes (no multiply-adds to speak of): the forward reads
// x twice (statistics, then the apply) and writes y; the backward needs two passes over dy and x
// (the sums, then the gradient, recomputing the activation's derivative in each) and writes dx once;
// a squeeze-and-excitation gate's gradient reads dy and x; inference reads x and writes y.
// Per-channel vectors are negligible. `kiln bench --profile` sets the kernels' times against these.
#include "ops/conv_bn_act/conv_bn_act_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost forward(const Program& p, const Op& op) {
  const auto f = op_fields<BnActForward>(op);
  OpCost cost;
  cost.bytes = 2 * tensor_bytes(p, f.x) + tensor_bytes(p, f.y);
  return cost;
}
OpCost backward(const Program& p, const Op& op) {
  const auto f = op_fields<BnActBackward>(op);
  OpCost cost;
  cost.bytes = 2 * tensor_bytes(p, f.dy) + 2 * tensor_bytes(p, f.x) + tensor_bytes(p, f.dx);
  return cost;
}
OpCost gate_gradient(const Program& p, const Op& op) {
  const auto f = op_fields<BnActGateGrad>(op);
  OpCost cost;
  cost.bytes = tensor_bytes(p, f.dy) + tensor_bytes(p, f.x);
  return cost;
}
OpCost inference(const Program& p, const Op& op) {
  const auto f = op_fields<BnActInference>(op);
  OpCost cost;
  cost.bytes = tensor_bytes(p, f.x) + tensor_bytes(p, f.y);
  return cost;
}

}  // namespace

namespace ops {
extern const OpCostTable conv_bn_act_op_costs;
const OpCostTable conv_bn_act_op_costs{
    {OpKind::BN_ACT_FWD, &forward},
    {OpKind::BN_ACT_BWD, &backward},
    {OpKind::BN_ACT_GATE_GRAD, &gate_gradient},
    {OpKind::BN_ACT_INF, &inference}};
}  // namespace ops
}  // namespace kiln
