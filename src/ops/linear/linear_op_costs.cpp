// The linear layer's costs: 2 x N x O x I flops a pass; the backward makes dW and, where the layer
// has one, dX.
#include "ops/linear/linear_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost forward(const Program& p, const Op& op) {
  const auto f = op_fields<LinearForward>(op);
  return matmul_cost(p, op, f.y, f.w);
}
OpCost backward(const Program& p, const Op& op) {
  const auto f = op_fields<LinearBackward>(op);
  return matmul_cost(p, op, f.dy, f.w, gradient_passes(f.dx));
}

}  // namespace

namespace ops {
extern const OpCostTable linear_op_costs;
const OpCostTable linear_op_costs{{OpKind::LINEAR_FWD, &forward}, {OpKind::LINEAR_BWD, &backward}};
}  // namespace ops
}  // namespace kiln
