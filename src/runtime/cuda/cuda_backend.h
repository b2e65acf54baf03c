#pragma once
// The CUDA backend: one device arena, a main and a side stream with events between them, the
// cuDNN handle and graph cache, and per-stream workspaces sized while ops are prepared.
//
// The main stream has the higher priority: when an op overlaps short memory-bound kernels on the
// main stream with a long convolution on the side stream, the block scheduler hands freed SMs to
// the main stream's kernels first, so they are not starved until the convolution drains.
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "runtime/backend.h"

namespace kiln::cuda {

class CudnnGraphs;

class CudaBackend final : public Backend {
 public:
  static constexpr int kStreams = 2;  // 0: main, 1: side (e.g. wgrad beside dgrad)

  // Reads KILN_PIPELINE_CHUNKS (see pipeline_chunks()) and KILN_SIDE_STREAM (see stream()) from
  // the environment.
  explicit CudaBackend(int index);
  ~CudaBackend() override;

  Device device() const override { return Device::CUDA; }
  std::byte* allocate(size_t bytes) override;
  void release(std::byte* memory) override;
  void copy_in(void* dst, const void* host_src, size_t bytes) override;
  void copy_out(void* host_dst, const void* src, size_t bytes) override;
  void request_workspace(size_t bytes) override;
  void finish_prepare() override;
  void synchronize() override;
  void activate() override;

  // With the side stream off (KILN_SIDE_STREAM=0), stream(1) is the main stream: work meant to
  // overlap runs in issue order instead.
  cudaStream_t stream(int index = 0) const { return side_stream_ ? streams_[index] : streams_[0]; }
  // Makes stream `to` wait for all work issued so far on stream `from`.
  void order(int from, int to);
  bool side_stream() const { return side_stream_; }
  // Scratch memory for work on stream `index`; ops never share one workspace across streams.
  void* workspace(int index = 0) const { return workspace_[index]; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  CudnnGraphs& graphs();
  int device_ordinal() const { return device_; }
  // How many batch slices an op may cut a data-gradient convolution into, so that slice i runs on
  // the side stream while the main stream prepares slice i+1 (CBR backward). 1 (the default)
  // turns pipelining off (ops/common/pipeline_slices.h says why). From KILN_PIPELINE_CHUNKS.
  int pipeline_chunks() const { return pipeline_chunks_; }

 private:
  int device_ = 0;
  cudaStream_t streams_[kStreams] = {};
  cudaEvent_t events_[kStreams] = {};
  void* workspace_[kStreams] = {};
  size_t workspace_bytes_ = 0, requested_bytes_ = 0;
  int pipeline_chunks_ = 1;
  bool side_stream_ = true;
  CudnnGraphs* graphs_ = nullptr;  // the process-wide cache of this device
};

// The CUDA backend of an op call (a kiln::Error if the call runs on another backend).
CudaBackend& cuda_backend(Backend* backend, const std::string& where);

}  // namespace kiln::cuda
