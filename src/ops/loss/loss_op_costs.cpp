// The loss family's costs: its ops only move bytes (each tensor read or written once).
#include "runtime/op_cost.h"

namespace kiln {
namespace ops {
extern const OpCostTable loss_op_costs;
const OpCostTable loss_op_costs{
    {OpKind::SOFTMAX_CE, &memory_bound},
    {OpKind::COUNT_CORRECT, &memory_bound},
    {OpKind::ACCUMULATE_TOTALS, &memory_bound},
};
}  // namespace ops
}  // namespace kiln
