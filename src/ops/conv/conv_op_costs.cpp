// The convolution's costs: each of forward, data gradient and weight gradient is one pass of
// 2 x (output or dY elements) x (R x S x C) flops.
#include "ops/conv/conv_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost forward(const Program& p, const Op& op) {
  const auto f = op_fields<ConvForward>(op);
  return matmul_cost(p, op, f.y, f.w);
}
OpCost dgrad(const Program& p, const Op& op) {
  const auto f = op_fields<ConvDgrad>(op);
  return matmul_cost(p, op, f.dy, f.w);
}
OpCost wgrad(const Program& p, const Op& op) {
  const auto f = op_fields<ConvWgrad>(op);
  return matmul_cost(p, op, f.dy, f.dw);
}

}  // namespace

namespace ops {
extern const OpCostTable conv_op_costs;
const OpCostTable conv_op_costs{
    {OpKind::CONV_FWD, &forward}, {OpKind::CONV_DGRAD, &dgrad}, {OpKind::CONV_WGRAD, &wgrad}};
}  // namespace ops
}  // namespace kiln
