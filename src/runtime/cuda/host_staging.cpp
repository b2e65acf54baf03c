#include "runtime/cuda/host_staging.h"

#include <cstring>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/pixel_normalize_cuda.h"

namespace kiln::cuda {

HostStaging::HostStaging() {
  KILN_CUDA(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cuda backend");
}

HostStaging::~HostStaging() {
  // Destructors must not throw: errors here only mean the device is already gone.
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  for (Buffer& s : staging_) {
    if (s.copied) cudaEventDestroy(s.copied);
    if (s.taken) cudaEventDestroy(s.taken);
    if (s.host) cudaFreeHost(s.host);
    if (s.device) cudaFree(s.device);
  }
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
  if (gather_) cudaFreeHost(gather_);
}

HostStaging::Buffer& HostStaging::stage(const void* src, size_t bytes, cudaStream_t main_stream, const char* what) {
  Buffer& s = staging_[next_staging_];
  next_staging_ = (next_staging_ + 1) % kStaging;
  if (s.copied) KILN_CUDA(cudaEventSynchronize(s.copied), what);  // `host` is free again
  if (s.bytes < bytes) {
    if (s.taken) KILN_CUDA(cudaEventSynchronize(s.taken), what);  // nothing reads `device` any more
    if (s.host) KILN_CUDA(cudaFreeHost(s.host), what);
    if (s.device) KILN_CUDA(cudaFree(s.device), what);
    s.host = s.device = nullptr, s.bytes = 0;
    KILN_CUDA(cudaMallocHost(&s.host, bytes), what);
    KILN_CUDA(cudaMalloc(&s.device, bytes), what);
    s.bytes = bytes;
  }
  if (!s.copied) KILN_CUDA(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming), what);
  if (!s.taken) KILN_CUDA(cudaEventCreateWithFlags(&s.taken, cudaEventDisableTiming), what);
  std::memcpy(s.host, src, bytes);
  // The copy stream overwrites `device` once the main stream has taken its previous bytes (an
  // event never recorded is already complete).
  KILN_CUDA(cudaStreamWaitEvent(copy_stream_, s.taken, 0), what);
  KILN_CUDA(cudaMemcpyAsync(s.device, s.host, bytes, cudaMemcpyHostToDevice, copy_stream_), what);
  KILN_CUDA(cudaEventRecord(s.copied, copy_stream_), what);
  KILN_CUDA(cudaStreamWaitEvent(main_stream, s.copied, 0), what);
  return s;
}

void HostStaging::copy_in_ordered(void* dst, const void* src, size_t bytes, cudaStream_t main_stream) {
  const char* what = "staged copy to device";
  Buffer& s = stage(src, bytes, main_stream, what);
  KILN_CUDA(cudaMemcpyAsync(dst, s.device, bytes, cudaMemcpyDeviceToDevice, main_stream), what);
  KILN_CUDA(cudaEventRecord(s.taken, main_stream), what);
}

void HostStaging::normalize_in_ordered(float* dst, const uint8_t* pixels, int64_t count, const PixelNormalization& n,
                                       cudaStream_t main_stream) {
  const char* what = "staged pixels to device";
  Buffer& s = stage(pixels, size_t(count), main_stream, what);
  launch_normalize_pixels(dst, static_cast<const uint8_t*>(s.device), count, n, main_stream);
  KILN_CUDA(cudaGetLastError(), what);
  KILN_CUDA(cudaEventRecord(s.taken, main_stream), what);
}

void HostStaging::copy_out_many(const std::vector<Backend::CopyOut>& copies, cudaStream_t main_stream) {
  // Each copy at its own 256-byte aligned place in the pinned buffer.
  std::vector<size_t> at(copies.size());
  size_t total = 0;
  for (size_t i = 0; i < copies.size(); ++i) at[i] = total, total += (copies[i].bytes + 255) / 256 * 256;
  if (total > gather_bytes_) {
    if (gather_) KILN_CUDA(cudaFreeHost(gather_), "copy from device");
    gather_ = nullptr, gather_bytes_ = 0;
    KILN_CUDA(cudaMallocHost(&gather_, total), "copy from device");
    gather_bytes_ = total;
  }
  std::byte* gather = static_cast<std::byte*>(gather_);
  for (size_t i = 0; i < copies.size(); ++i)
    KILN_CUDA(cudaMemcpyAsync(gather + at[i], copies[i].src, copies[i].bytes, cudaMemcpyDeviceToHost, main_stream),
              "copy from device");
  KILN_CUDA(cudaStreamSynchronize(main_stream), "copy from device");
  for (size_t i = 0; i < copies.size(); ++i) std::memcpy(copies[i].host_dst, gather + at[i], copies[i].bytes);
}

void HostStaging::synchronize() { KILN_CUDA(cudaStreamSynchronize(copy_stream_), "synchronize"); }

}  // namespace kiln::cuda
