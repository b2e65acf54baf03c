#pragma once
// Where a program's arena lives and how bytes move in and out of it. The CPU backend is plain
// host memory; the CUDA backend (src/runtime/cuda/) owns device memory, streams, the cuDNN
// handle and graph cache, and the op workspace.
#include <cstddef>
#include <memory>

#include "kiln/dtype.h"
#include "kiln/options.h"

namespace kiln {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // One zero-filled allocation for the whole arena, made once per executable.
  virtual std::byte* allocate(size_t bytes) = 0;
  virtual void release(std::byte* memory) = 0;
  virtual void copy_in(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_out(void* host_dst, const void* src, size_t bytes) = 0;
  // Ops ask for scratch memory while being prepared; it is allocated once afterwards.
  virtual void request_workspace(size_t bytes) { (void)bytes; }
  virtual void finish_prepare() {}
  // What the ops' scratch memory takes in all, beside the arena.
  virtual size_t workspace_total_bytes() const { return 0; }
  // Waits until all work issued so far has finished.
  virtual void synchronize() {}
  // Makes this backend's device current for the calling thread before its ops run.
  virtual void activate() {}
};

std::unique_ptr<Backend> make_cpu_backend();
// GPU `index` (cudaSetDevice ordinal) with the CUDA settings of the program (CompileOptions::cuda;
// the KILN_* environment variables override them); throws kiln::Error when built without CUDA,
// when that GPU does not exist or when a setting is invalid.
std::unique_ptr<Backend> make_cuda_backend(int index, const CudaOptions& options);

}  // namespace kiln
