// The CBR's costs: the convolution's pass (two in the backward, weight gradient and data gradient,
// one where the layer has no dX); BN and ReLU only move bytes. The running statistics are read and
// rewritten.
#include "ops/cbr/cbr_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost forward(const Program& p, const Op& op) {
  const auto f = op_fields<CbrForward>(op);
  OpCost cost = matmul_cost(p, op, f.conv_out, f.w);
  cost.bytes += tensor_bytes(p, f.running_mean) + tensor_bytes(p, f.running_var);
  return cost;
}
OpCost backward(const Program& p, const Op& op) {
  const auto f = op_fields<CbrBackward>(op);
  return matmul_cost(p, op, f.dy, f.w, gradient_passes(f.dx));
}
OpCost inference(const Program& p, const Op& op) {
  const auto f = op_fields<CbrInference>(op);
  return matmul_cost(p, op, f.y, f.w);
}

}  // namespace

namespace ops {
extern const OpCostTable cbr_op_costs;
const OpCostTable cbr_op_costs{
    {OpKind::CBR_FWD, &forward},
    {OpKind::CBR_BWD, &backward},
    {OpKind::CBR_BWD_FIRST, &backward},  // the first layer's: no dX, one pass
    {OpKind::CBR_INF, &inference}};
}  // namespace ops
}  // namespace kiln
