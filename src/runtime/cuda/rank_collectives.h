#pragma once
// Data parallel on the CUDA backend: the gradient averages and broadcasts over the ranks (a
// ProcessGroup, kiln/data_parallel.h: NCCL where it is built). The averages run on a communication
// stream of their own, made at the first, which waits for the main and side streams' work so far;
// the main stream joins them before the optimizer reads the gradients.
#include <cuda_runtime.h>

#include <cstddef>

#include "kiln/data_parallel.h"
#include "kiln/dtype.h"
#include "runtime/cuda/stream_schedule.h"

namespace kiln::cuda {

class RankCollectives {
 public:
  RankCollectives() = default;
  ~RankCollectives();
  RankCollectives(const RankCollectives&) = delete;
  RankCollectives& operator=(const RankCollectives&) = delete;

  // Averages `count` elements at `data` over the ranks, after everything issued so far on the
  // schedule's streams.
  void average(ProcessGroup& group, void* data, size_t count, DType dtype, const StreamSchedule& streams);
  // The main stream waits for the averages issued since the last join.
  void join(cudaStream_t main_stream);
  // `bytes` at `data` from rank `root` to every rank, on the main stream.
  void broadcast(ProcessGroup& group, void* data, size_t bytes, int root, cudaStream_t main_stream);
  // Waits for the communication stream, if there is one.
  void synchronize();
  // The averages of an abandoned capture: not to be joined.
  void forget_pending() { averages_pending_ = false; }

 private:
  static constexpr int kStreams = StreamSchedule::kStreams;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t comm_events_[kStreams + 1] = {};  // each stream: ready for the average; comm: done
  bool averages_pending_ = false;
  void make_comm_stream();
};

}  // namespace kiln::cuda
