#pragma once
// The CUDA backend's stream schedule: a main and a side stream with the events that order them,
// following the stream placement the Program carries. Every op runs on the main stream; an op's
// wgrad may run on the side stream beside its dgrad, and on beside the next op where the program
// says so (Op::side_work_outlives, decided in compile/op_streams.h).
//
// The main stream has the higher priority: when an op overlaps short memory-bound kernels on the
// main stream with a long convolution on the side stream, the block scheduler hands freed SMs to
// the main stream's kernels first, so they are not starved until the convolution drains.
#include <cuda_runtime.h>

namespace kiln::cuda {

class StreamSchedule {
 public:
  static constexpr int kStreams = 2;  // 0: main, 1: side (e.g. wgrad beside dgrad)

  // The streams and their events, on the current device.
  StreamSchedule();
  ~StreamSchedule();
  StreamSchedule(const StreamSchedule&) = delete;
  StreamSchedule& operator=(const StreamSchedule&) = delete;

  // Stream `index`: 0 the main stream, 1 the side stream.
  cudaStream_t stream(int index = 0) const { return streams_[index]; }
  cudaStream_t main_stream() const { return streams_[0]; }
  // Makes stream `to` wait for all work issued so far on stream `from`.
  void order(int from, int to);
  // Before an op: whether the program lets its side work outlive it (Op::side_work_outlives).
  void before_op(bool side_work_outlives);
  // An op calls this once it has issued its side-stream work. The main stream waits for that
  // work now, or, where the op's side work may outlive it, at the end of the next op, so it
  // overlaps that op; the memory plan keeps the op's tensors alive until then.
  void end_side_work();
  // After each op: the main stream waits for the side work the op before it left running.
  void after_op();
  // After the last op: nothing of the side stream's is left unjoined.
  void after_ops();
  // Waits for both streams.
  void synchronize();
  // Nothing left for the main stream to wait for: after a synchronize, or a capture abandoned
  // (events recorded inside it must not be waited for outside it).
  void forget_pending();

 private:
  cudaStream_t streams_[kStreams] = {};
  cudaEvent_t events_[kStreams] = {};
  // Side work left running by an op (end_side_work): recorded in deferred_[slot_] by the current
  // op, waited for by the main stream when the next op ends (deferred_[slot_ ^ 1] by then).
  cudaEvent_t deferred_[2] = {};
  int slot_ = 0;
  bool may_defer_ = false, deferred_now_ = false, previous_pending_ = false;
  void join_previous();
};

}  // namespace kiln::cuda
