// The convolution's costs: each of forward, data gradient and weight gradient is one pass of
// 2 x (output or dY elements) x (R x S x C) flops.
#include "ops/conv/conv_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost forward(const Program& p, const Op& op) {
  const auto f = op_fields<ConvForward>(op);
  return {matmul_pass_flops(p, f.y, f.w), each_tensor_once(p, op)};
}
OpCost dgrad(const Program& p, const Op& op) {
  const auto f = op_fields<ConvDgrad>(op);
  return {matmul_pass_flops(p, f.dy, f.w), each_tensor_once(p, op)};
}
OpCost wgrad(const Program& p, const Op& op) {
  const auto f = op_fields<ConvWgrad>(op);
  return {matmul_pass_flops(p, f.dy, f.dw), each_tensor_once(p, op)};
}

}  // namespace

namespace ops {
extern const OpCostTable conv_op_costs;
const OpCostTable conv_op_costs{
    {OpKind::CONV_FWD, &forward}, {OpKind::CONV_DGRAD, &dgrad}, {OpKind::CONV_WGRAD, &wgrad}};
}  // namespace ops
}  // namespace kiln
