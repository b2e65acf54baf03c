// The elementwise family's costs: its ops only move bytes (each tensor read or written once).
#include "runtime/op_cost.h"

namespace kiln {
namespace ops {
extern const OpCostTable elementwise_op_costs;
const OpCostTable elementwise_op_costs{
    {OpKind::RELU_FWD, &memory_bound},
    {OpKind::RELU_BWD, &memory_bound},
    {OpKind::RELU_INF, &memory_bound},
    {OpKind::DROPOUT_FWD, &memory_bound},
    {OpKind::DROPOUT_BWD, &memory_bound},
    {OpKind::STOCHASTIC_DEPTH_FWD, &memory_bound},
    {OpKind::STOCHASTIC_DEPTH_BWD, &memory_bound},
    {OpKind::ADD_FWD, &memory_bound},
    {OpKind::GRAD_SUM, &memory_bound},
    {OpKind::CAST, &memory_bound},
};
}  // namespace ops
}  // namespace kiln
