// The block ends' costs: conv + BN is the convolution's pass (two in the backward where the layer
// has a dX: weight gradient, then data gradient); BN + add + ReLU only moves bytes. The running
// statistics are read and rewritten.
#include "ops/resblock/resblock_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost conv_bn_forward(const Program& p, const Op& op) {
  const auto f = op_fields<ConvBnForward>(op);
  OpCost cost = matmul_cost(p, op, f.conv_out, f.w);
  cost.bytes += tensor_bytes(p, f.running_mean) + tensor_bytes(p, f.running_var);
  return cost;
}
OpCost conv_bn_inference(const Program& p, const Op& op) {
  const auto f = op_fields<ConvBnInference>(op);
  return matmul_cost(p, op, f.conv_out, f.w);
}
OpCost conv_bn_backward(const Program& p, const Op& op) {
  const auto f = op_fields<ConvBnBackward>(op);
  return matmul_cost(p, op, f.dconv, f.w, gradient_passes(f.dx));
}

}  // namespace

namespace ops {
extern const OpCostTable resblock_op_costs;
const OpCostTable resblock_op_costs{{OpKind::CONV_BN_FWD, &conv_bn_forward},
                                    {OpKind::CONV_BN_INF, &conv_bn_inference},
                                    {OpKind::CONV_BN_BWD, &conv_bn_backward},
                                    {OpKind::BN_ADD_RELU_FWD, &memory_bound},
                                    {OpKind::BN_ADD_RELU_BWD, &memory_bound},
                                    {OpKind::BN_ADD_RELU_INF, &memory_bound}};
}  // namespace ops
}  // namespace kiln
