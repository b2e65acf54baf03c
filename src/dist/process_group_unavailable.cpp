// Builds without CUDA or NCCL: data-parallel training is refused with the fix.
#include "kiln/data_parallel.h"
#include "kiln/error.h"

namespace kiln {

std::shared_ptr<ProcessGroup> join_process_group(const RankEnv& env, double timeout_seconds) {
  (void)timeout_seconds;
  fail("rank {} of {}: this kiln was built without NCCL, so it cannot train data-parallel; build it where nvcc and "
       "NCCL are found (scripts/setup.sh fetches NCCL), or train on one GPU without --gpus",
       env.rank, env.ranks);
}

bool data_parallel_built() { return false; }

}  // namespace kiln
