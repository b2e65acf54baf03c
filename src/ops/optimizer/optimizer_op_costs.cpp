// The optimizers' costs: they only move bytes, and read and rewrite the parameters and their state
// (momentum; AdamW's two moments; RMSprop's square average and, where kept, its momentum and
// gradient average). LARS reads the parameters and gradients twice: once for the norms.
#include "ops/optimizer/optimizer_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost sgd(const Program& p, const Op& op) {
  const auto f = op_fields<SgdUpdate>(op);
  return {0, each_tensor_once(p, op) + tensor_bytes(p, f.params) + tensor_bytes(p, f.momentum_buffer)};
}
OpCost adamw(const Program& p, const Op& op) {
  const auto f = op_fields<AdamWUpdate>(op);
  return {0, each_tensor_once(p, op) + tensor_bytes(p, f.params) + tensor_bytes(p, f.exp_avg) +
                 tensor_bytes(p, f.exp_avg_sq)};
}

OpCost rmsprop(const Program& p, const Op& op) {
  const auto f = op_fields<RmspropUpdate>(op);
  return {0, each_tensor_once(p, op) + tensor_bytes(p, f.params) + tensor_bytes(p, f.square_avg) +
                 tensor_bytes(p, f.momentum_buffer) + tensor_bytes(p, f.grad_avg)};
}

// LARS's parameter views are the parameter region again: each region counts, the views do not.
OpCost lars(const Program& p, const Op& op) {
  const auto f = op_fields<LarsUpdate>(op);
  const double grads = tensor_bytes(p, f.grads) + tensor_bytes(p, f.compute_grads);
  const double norms = tensor_bytes(p, f.params) + grads;
  const double update = grads + 2 * (tensor_bytes(p, f.params) + tensor_bytes(p, f.momentum_buffer)) +
                        tensor_bytes(p, f.compute_params);
  return {0, norms + update};
}

}  // namespace

namespace ops {
extern const OpCostTable optimizer_op_costs;
const OpCostTable optimizer_op_costs{{OpKind::SGD_UPDATE, &sgd}, {OpKind::ADAMW_UPDATE, &adamw},
                                      {OpKind::LARS_UPDATE, &lars}, {OpKind::RMSPROP_UPDATE, &rmsprop}};
}  // namespace ops
}  // namespace kiln
