#include "runtime/cuda/device_memory.h"

#include <algorithm>

#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {

std::byte* allocate_arena(size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, std::max<size_t>(bytes, 256));
  if (status != cudaSuccess)
    fail("cannot allocate the {:.1f} MiB device arena of this program ({}); use a smaller batch",
         double(bytes) / 1048576.0, cudaGetErrorString(status));
  // On the main stream, and waited for: kiln's streams are non-blocking, so a memset on the legacy
  // default stream is not ordered before their work and could zero the first inputs copied in
  // (seen on the H200: small programs with nothing to prepare read zeros).
  KILN_CUDA(cudaMemsetAsync(p, 0, bytes, stream), "device arena");
  KILN_CUDA(cudaStreamSynchronize(stream), "device arena");
  return static_cast<std::byte*>(p);
}

void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  KILN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), "copy to device");
  KILN_CUDA(cudaStreamSynchronize(stream), "copy to device");
}

void zero_device(void* dst, size_t bytes, cudaStream_t stream) {
  KILN_CUDA(cudaMemsetAsync(dst, 0, bytes, stream), "zeroing device memory");
  KILN_CUDA(cudaStreamSynchronize(stream), "zeroing device memory");
}

void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  KILN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream), "copy from device");
  KILN_CUDA(cudaStreamSynchronize(stream), "copy from device");
}

StreamWorkspaces::~StreamWorkspaces() {
  for (void* w : workspace_)
    if (w) cudaFree(w);  // an error here only means the device is already gone
}

void StreamWorkspaces::request(size_t bytes, int stream) {
  if (stream < 0 || stream >= kStreams) fail("internal: workspace requested for stream {} of {}", stream, kStreams);
  requested_bytes_[stream] = std::max(requested_bytes_[stream], bytes);
}

void StreamWorkspaces::allocate_requested() {
  for (int i = 0; i < kStreams; ++i) {
    if (requested_bytes_[i] <= workspace_bytes_[i]) continue;
    if (workspace_[i]) KILN_CUDA(cudaFree(workspace_[i]), "workspace");
    workspace_[i] = nullptr, workspace_bytes_[i] = 0;
    if (cudaMalloc(&workspace_[i], requested_bytes_[i]) != cudaSuccess)
      fail("cannot allocate {:.1f} MiB of op workspace; use a smaller batch", double(requested_bytes_[i]) / 1048576.0);
    workspace_bytes_[i] = requested_bytes_[i];
  }
}

size_t StreamWorkspaces::total_bytes() const { return workspace_bytes_[0] + workspace_bytes_[1]; }

}  // namespace kiln::cuda
