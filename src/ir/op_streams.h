#pragma once
// Which GPU stream each op of a list runs on, derived from the bytes each op reads and writes.
//
// Two streams: 0, where every op runs unless it can overlap, and 1, the branch stream. Two ops
// depend on each other when their arena bytes overlap and one of them writes (read after write,
// write after read, write after write: so the memory plan's reuse of bytes orders ops as the data
// does). An op goes on stream 0 when it depends, directly or through others, on the last op
// placed there, else on stream 1 when it depends on the last op placed there (or stream 1 has
// none yet in this list), else on stream 0: so an op joins the stream it would wait for anyway,
// and only an op independent of the op before it leaves the main stream (ResNet's projection
// shortcut beside its block's body, forward and backward). An op on one stream waits for the
// latest op it depends on on the other (Op::wait_back), which records its end (Op::signals).
// Each list starts from everything before it and ends with both streams joined.
#include <string>
#include <vector>

#include "kiln/program.h"

namespace kiln {

// Sets Op::stream, wait_back and signals in every op list of `program` (its memory plan placed),
// and checks each list with unordered_op_pair (an internal kiln::Error if a pair is out of order);
// with `branch` false every op is on stream 0 with no waits.
void assign_op_streams(Program& program, bool branch);

// Whether every two ops of `ops` that depend on each other (as above) run in list order on the
// GPU: on one stream in that order, or through waits. An empty string when they do, else which
// pair does not (a self-check of assign_op_streams, and what its tests assert).
std::string unordered_op_pair(const Program& program, const std::vector<Op>& ops);

// How many ops of `ops` run on the branch stream.
int branch_stream_ops(const std::vector<Op>& ops);

}  // namespace kiln
