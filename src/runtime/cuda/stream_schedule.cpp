#include "runtime/cuda/stream_schedule.h"

#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {

StreamSchedule::StreamSchedule() {
  int least = 0, greatest = 0;
  KILN_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cuda backend");
  for (int i = 0; i < kStreams; ++i) {
    const int priority = i == 0 ? greatest : least;
    KILN_CUDA(cudaStreamCreateWithPriority(&streams_[i], cudaStreamNonBlocking, priority), "cuda backend");
    KILN_CUDA(cudaEventCreateWithFlags(&events_[i], cudaEventDisableTiming), "cuda backend");
  }
  for (cudaEvent_t& e : deferred_) KILN_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cuda backend");
}

StreamSchedule::~StreamSchedule() {
  // Destructors must not throw: errors here only mean the device is already gone.
  for (cudaEvent_t e : deferred_)
    if (e) cudaEventDestroy(e);
  for (int i = 0; i < kStreams; ++i) {
    if (events_[i]) cudaEventDestroy(events_[i]);
    if (streams_[i]) cudaStreamDestroy(streams_[i]);
  }
}

void StreamSchedule::order(int from, int to) {
  KILN_CUDA(cudaEventRecord(events_[from], streams_[from]), "stream order");
  KILN_CUDA(cudaStreamWaitEvent(streams_[to], events_[from], 0), "stream order");
}

void StreamSchedule::before_op(bool side_work_outlives) {
  may_defer_ = side_work_outlives;
  deferred_now_ = false;
}

void StreamSchedule::end_side_work() {
  if (!may_defer_) return order(1, 0);
  KILN_CUDA(cudaEventRecord(deferred_[slot_], streams_[1]), "stream order");
  deferred_now_ = true;
}

void StreamSchedule::join_previous() {
  if (previous_pending_) KILN_CUDA(cudaStreamWaitEvent(main_stream(), deferred_[slot_ ^ 1], 0), "stream order");
  previous_pending_ = false;
}

void StreamSchedule::after_op() {
  // The op before this one may have left work on the side stream: the next op starts after it.
  join_previous();
  previous_pending_ = deferred_now_;
  deferred_now_ = false, may_defer_ = false;
  slot_ ^= 1;
}

void StreamSchedule::after_ops() { join_previous(); }

void StreamSchedule::synchronize() {
  for (cudaStream_t stream : streams_) KILN_CUDA(cudaStreamSynchronize(stream), "synchronize");
}

void StreamSchedule::forget_pending() { previous_pending_ = deferred_now_ = false; }

}  // namespace kiln::cuda
