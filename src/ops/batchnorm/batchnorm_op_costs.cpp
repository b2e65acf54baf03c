// BatchNorm's costs: it only moves bytes; training reads and rewrites the running statistics.
#include "ops/batchnorm/batchnorm_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost forward_train(const Program& p, const Op& op) {
  const auto f = op_fields<BnForwardTrain>(op);
  return {0, each_tensor_once(p, op) + tensor_bytes(p, f.running_mean) + tensor_bytes(p, f.running_var)};
}

}  // namespace

namespace ops {
extern const OpCostTable batchnorm_op_costs;
const OpCostTable batchnorm_op_costs{
    {OpKind::BN_FWD_TRAIN, &forward_train}, {OpKind::BN_BWD, &memory_bound}, {OpKind::BN_INF, &memory_bound}};
}  // namespace ops
}  // namespace kiln
