// The loss_scale family's costs: its ops only move bytes (each tensor read or written once).
#include "runtime/op_cost.h"

namespace kiln {
namespace ops {
extern const OpCostTable loss_scale_op_costs;
const OpCostTable loss_scale_op_costs{
    {OpKind::FIND_NONFINITE, &memory_bound},
    {OpKind::UPDATE_LOSS_SCALE, &memory_bound},
};
}  // namespace ops
}  // namespace kiln
