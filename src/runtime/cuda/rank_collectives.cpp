#include "runtime/cuda/rank_collectives.h"

#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {

RankCollectives::~RankCollectives() {
  // Destructors must not throw: errors here only mean the device is already gone.
  if (comm_stream_) cudaStreamSynchronize(comm_stream_), cudaStreamDestroy(comm_stream_);
  for (cudaEvent_t e : comm_events_)
    if (e) cudaEventDestroy(e);
}

void RankCollectives::make_comm_stream() {
  if (comm_stream_) return;
  // The highest priority: a rank late with its share of a collective holds every other rank up.
  int least = 0, greatest = 0;
  KILN_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest), "data parallel");
  KILN_CUDA(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest), "data parallel");
  for (cudaEvent_t& e : comm_events_) KILN_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "data parallel");
}

void RankCollectives::average(ProcessGroup& group, void* data, size_t count, DType dtype,
                              const StreamSchedule& streams) {
  make_comm_stream();
  // Everything issued so far on every stream, the side streams' wgrad included (deferred or not).
  // Under CUDA Graph capture a stream that has not joined the capture holds none of the step's
  // work, and waiting on an event recorded there is an error (cudaErrorStreamCaptureIsolation).
  cudaStreamCaptureStatus main_capture = cudaStreamCaptureStatusNone;
  KILN_CUDA(cudaStreamIsCapturing(streams.main_stream(), &main_capture), "data parallel");
  for (int i = 0; i < kStreams; ++i) {
    cudaStream_t s = streams.stream(i);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    KILN_CUDA(cudaStreamIsCapturing(s, &capture), "data parallel");
    if (main_capture == cudaStreamCaptureStatusActive && capture != cudaStreamCaptureStatusActive) continue;
    cudaEvent_t& ready = comm_events_[i];
    KILN_CUDA(cudaEventRecord(ready, s), "data parallel");
    KILN_CUDA(cudaStreamWaitEvent(comm_stream_, ready, 0), "data parallel");
  }
  group.average(data, count, dtype, comm_stream_);
  averages_pending_ = true;
}

void RankCollectives::join(cudaStream_t main_stream) {
  if (!averages_pending_) return;
  cudaEvent_t& done = comm_events_[kStreams];
  KILN_CUDA(cudaEventRecord(done, comm_stream_), "data parallel");
  KILN_CUDA(cudaStreamWaitEvent(main_stream, done, 0), "data parallel");
  averages_pending_ = false;
}

void RankCollectives::broadcast(ProcessGroup& group, void* data, size_t bytes, int root, cudaStream_t main_stream) {
  group.broadcast(data, bytes, root, main_stream);
}

void RankCollectives::synchronize() {
  if (comm_stream_) KILN_CUDA(cudaStreamSynchronize(comm_stream_), "synchronize");
}

}  // namespace kiln::cuda
