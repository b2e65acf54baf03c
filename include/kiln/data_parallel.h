#pragma once
// Data-parallel training: one process per GPU (a "rank"), every rank running the same program on
// its own share of each batch, the gradients averaged over NCCL inside the captured step. A
// launcher starts the ranks (`kiln train --gpus N`, or torchrun) and tells each who it is through
// the environment; join_process_group connects them.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln {

// Where this process stands among the ranks: torchrun's variables RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR and MASTER_PORT, and KILN_RANK_DEVICE, the GPU ordinal `kiln train --gpus` gives
// each rank (LOCAL_RANK when unset).
struct RankEnv {
  int rank = 0, ranks = 1, local_rank = 0;
  int device = 0;  // the CUDA ordinal this rank trains on
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
};

// The rank environment, or nullopt when WORLD_SIZE is not set (a process that trains alone). A
// kiln::Error names the variable that is missing, malformed or inconsistent (RANK >= WORLD_SIZE,
// a port outside 1-65535, ...) and what to set.
std::optional<RankEnv> rank_env_from_environment();

enum class HostReduce { Sum, Max };

// The ranks of one run, joined over NCCL, one GPU each. Collectives on device memory are enqueued
// on the caller's CUDA stream (they may be captured into a CUDA Graph); the host reductions wait.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  virtual int device() const = 0;
  // In place: `count` values of `dtype` (F16, BF16, F32, F64) become their mean over the ranks.
  virtual void average(void* data, size_t count, DType dtype, void* cuda_stream) = 0;
  // In place: `bytes` at `data` become rank `root`'s.
  virtual void broadcast(void* data, size_t bytes, int root, void* cuda_stream) = 0;
  // Host values reduced over the ranks, in place; waits for the result. Every rank must call it
  // with the same count, in the same order among its collectives.
  virtual void reduce_host(std::vector<double>& values, HostReduce op) = 0;
  // Ends every collective in flight with an error, on this rank (a peer has gone): what waits on
  // them returns instead of hanging. Safe from another thread.
  virtual void abort(const std::string& why) = 0;
  // The watchdog against a peer that hangs without ending: once given a limit, a rank where
  // progress() is not called for `seconds` stops as it does for a lost peer. 0 disarms it.
  virtual void watchdog(double seconds) = 0;
  virtual void progress() = 0;
  // This rank's part ended as planned (training done, or stopped with the others): the peers will
  // not take its end for a failure. A group destroyed without it (an error) closes its connections
  // as a failed rank, so the others stop at once rather than wait in a collective.
  virtual void leave() = 0;
};

// Connects this rank with the others (rank 0 publishes NCCL's unique id at MASTER_ADDR:MASTER_PORT
// over TCP) within `timeout_seconds`, makes `env.device` current and creates the communicator.
// A rank that ends while the others train makes them stop with a kiln::Error message on stderr
// naming it, and exit non-zero. kiln::Error when built without NCCL, when a peer does not come in
// time (naming the address and the ranks missing) or when NCCL fails.
std::shared_ptr<ProcessGroup> join_process_group(const RankEnv& env, double timeout_seconds = 300);

// Whether this build can train data-parallel (CUDA and NCCL found at build time).
bool data_parallel_built();

}  // namespace kiln
