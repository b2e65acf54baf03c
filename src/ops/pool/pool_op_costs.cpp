// The pool family's costs: its ops only move bytes (each tensor read or written once).
#include "runtime/op_cost.h"

namespace kiln {
namespace ops {
extern const OpCostTable pool_op_costs;
const OpCostTable pool_op_costs{
    {OpKind::MAXPOOL_FWD, &memory_bound},
    {OpKind::MAXPOOL_BWD, &memory_bound},
    {OpKind::MAXPOOL_INF, &memory_bound},
    {OpKind::AVGPOOL_FWD, &memory_bound},
    {OpKind::AVGPOOL_BWD, &memory_bound},
    {OpKind::GAP_FWD, &memory_bound},
    {OpKind::GAP_BWD, &memory_bound},
    {OpKind::ADAPTIVE_AVGPOOL_FWD, &memory_bound},
    {OpKind::ADAPTIVE_AVGPOOL_BWD, &memory_bound},
};
}  // namespace ops
}  // namespace kiln
