#pragma once
// Pinned host memory between the host and the CUDA backend's main stream. In: staging buffers used
// in turn (kStaging of them, each pinned host memory and a device copy): the host copies the batch
// into one and goes on; a copy stream of their own moves it to the device while the main stream
// still runs the steps queued before it, and the main stream then takes it into the tensor (a
// device-to-device copy, or the pixels' normalization) in its order. So the next batch crosses
// PCIe while the current step trains. A buffer is refilled only once its last copies have left
// it. Out: many device regions through one pinned buffer, with one wait.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/backend.h"

namespace kiln::cuda {

class HostStaging {
 public:
  // The copy stream, on the current device; buffers are made at first use.
  HostStaging();
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // `bytes` of host memory into `dst`, in the order of the work queued on `main_stream`.
  void copy_in_ordered(void* dst, const void* host_src, size_t bytes, cudaStream_t main_stream);
  // uint8 pixels staged likewise, then converted into `dst` on `main_stream` (pixel_normalize_cuda.h).
  void normalize_in_ordered(float* dst, const uint8_t* pixels, int64_t count, const PixelNormalization& n,
                            cudaStream_t main_stream);
  // Into one pinned buffer on `main_stream`, one wait, then out to the hosts' memory.
  void copy_out_many(const std::vector<Backend::CopyOut>& copies, cudaStream_t main_stream);
  // Waits for the copy stream.
  void synchronize();

 private:
  static constexpr int kStaging = 4;  // a step's batch and labels, and the next step's
  struct Buffer {
    void* host = nullptr;    // pinned
    void* device = nullptr;  // where the copy stream puts the bytes
    size_t bytes = 0;
    cudaEvent_t copied = nullptr;  // the copy stream's copy out of `host` has finished
    cudaEvent_t taken = nullptr;   // the main stream's copy out of `device` has finished
  };
  cudaStream_t copy_stream_ = nullptr;  // host-to-device copies of staged batches
  Buffer staging_[kStaging];
  int next_staging_ = 0;
  // Stages `bytes` of `host_src` in the next staging buffer and makes `main_stream` wait for their
  // arrival; returns the buffer, whose device bytes the main stream's next work may read. The
  // caller records the buffer's `taken` event after that work.
  Buffer& stage(const void* host_src, size_t bytes, cudaStream_t main_stream, const char* what);
  void* gather_ = nullptr;  // pinned, for copy_out_many
  size_t gather_bytes_ = 0;
};

}  // namespace kiln::cuda
