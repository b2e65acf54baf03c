// The activation family's costs: its ops only move bytes (each tensor read or written once).
#include "runtime/op_cost.h"

namespace kiln {
namespace ops {
extern const OpCostTable activation_op_costs;
const OpCostTable activation_op_costs{
    {OpKind::ACTIVATION_FWD, &memory_bound},
    {OpKind::ACTIVATION_BWD, &memory_bound},
    {OpKind::ACTIVATION_INF, &memory_bound},
};
}  // namespace ops
}  // namespace kiln
