#pragma once
// Where the ops of a program run on the GPU, decided once, here, when the program is compiled,
// and carried by it (Op::side_work_outlives): the memory plan, `kiln plan` and the CUDA backend
// read it. Every op runs on the main stream, and an op whose contract says so (side_work_outlives_op:
// the CBR's and the block end's backward) issues its wgrad on the side stream beside its dgrad.
// On the GPU that wgrad runs on beside the next op of its list, which joins it when it ends, so
// the memory plan keeps the op's tensors live through the next op; the CPU runs ops one by one.
#include "kiln/program.h"

namespace kiln {

// Sets Op::side_work_outlives in every op list of `program` (lowered, its memory not yet planned):
// kept as the op's contract allows in a CUDA program, cleared in a CPU one.
void place_op_streams(Program& program);

}  // namespace kiln
