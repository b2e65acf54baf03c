// The channel family's costs: its ops only move bytes. A shuffle reads x and writes y once each
// (memory_bound); so does a slice's backward, which reads every slice gradient and writes the whole
// input gradient once (the channels no slice took are written as zeros). A slice's forward reads only
// the channels it takes: as many bytes as it writes.
#include "ops/channel/channel_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

OpCost slice_fwd_cost(const Program& program, const Op& op) {
  const auto f = op_fields<ChannelSliceForward>(op);
  return {0, 2 * tensor_bytes(program, f.y)};
}

}  // namespace

namespace ops {
extern const OpCostTable channel_op_costs;
const OpCostTable channel_op_costs{
    {OpKind::CHANNEL_SHUFFLE_FWD, &memory_bound},
    {OpKind::CHANNEL_SHUFFLE_BWD, &memory_bound},
    {OpKind::CHANNEL_SLICE_FWD, &slice_fwd_cost},
    {OpKind::CHANNEL_SLICE_BWD, &memory_bound},
};
}  // namespace ops
}  // namespace kiln
