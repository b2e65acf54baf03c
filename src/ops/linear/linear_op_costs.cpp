// The linear layer's costs: 2 x N x O x I flops a pass; the backward makes dW and, where the layer
// has one, dX.
#include "ops/linear/linear_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost forward(const Program& p, const Op& op) {
  const auto f = op_fields<LinearForward>(op);
  return {matmul_pass_flops(p, f.y, f.w), each_tensor_once(p, op)};
}
OpCost backward(const Program& p, const Op& op) {
  const auto f = op_fields<LinearBackward>(op);
  const int passes = f.dx.present() ? 2 : 1;
  return {passes * matmul_pass_flops(p, f.dy, f.w), each_tensor_once(p, op)};
}

}  // namespace

namespace ops {
extern const OpCostTable linear_op_costs;
const OpCostTable linear_op_costs{{OpKind::LINEAR_FWD, &forward}, {OpKind::LINEAR_BWD, &backward}};
}  // namespace ops
}  // namespace kiln
