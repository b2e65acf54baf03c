#pragma once
// The CUDA backend's device memory: a program's static arena, the copies in and out that the
// host waits for, and the op workspaces of each stream, sized while ops are prepared. Each call
// works on the stream it is given (the main stream): kiln's streams are non-blocking, so work on
// the legacy default stream would not be ordered with theirs.
#include <cuda_runtime.h>

#include <cstddef>

#include "runtime/cuda/stream_schedule.h"

namespace kiln::cuda {

// The program's arena of `bytes`, zeroed; kiln::Error saying to use a smaller batch when it does
// not fit.
std::byte* allocate_arena(size_t bytes, cudaStream_t stream);
// Host memory to the device, host waiting.
void copy_to_device(void* dst, const void* host_src, size_t bytes, cudaStream_t stream);
// Zeroes device memory, host waiting.
void zero_device(void* dst, size_t bytes, cudaStream_t stream);
// Device memory to the host, host waiting.
void copy_to_host(void* host_dst, const void* src, size_t bytes, cudaStream_t stream);

// Scratch memory for work on each stream, sized by the requests for that stream (so the side
// stream's, used by wgrad only, is only as large as the largest of those); ops never share one
// workspace across streams.
class StreamWorkspaces {
 public:
  static constexpr int kStreams = StreamSchedule::kStreams;

  StreamWorkspaces() = default;
  ~StreamWorkspaces();
  StreamWorkspaces(const StreamWorkspaces&) = delete;
  StreamWorkspaces& operator=(const StreamWorkspaces&) = delete;

  // While ops are prepared: stream `stream`'s workspace must hold `bytes`.
  void request(size_t bytes, int stream);
  // Grows each workspace to its largest request.
  void allocate_requested();
  void* workspace(int stream) const { return workspace_[stream]; }
  size_t bytes(int stream) const { return workspace_bytes_[stream]; }
  size_t total_bytes() const;

 private:
  void* workspace_[kStreams] = {};
  size_t workspace_bytes_[kStreams] = {}, requested_bytes_[kStreams] = {};
};

}  // namespace kiln::cuda
