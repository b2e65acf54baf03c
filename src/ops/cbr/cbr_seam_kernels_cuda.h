#pragma once
// The per-channel kernel of the GPU seams (cbr_seam_cuda.h): the fp16 copies of fp32 scale / shift
// that cuDNN's prologue graphs take. Asynchronous on `stream`; kiln::Error naming `where` on bad
// arguments or CUDA errors.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace kiln::cuda {

// out[i] = v[i] as fp16 (2-byte storage, round to nearest even), for i < n.
void floats_to_halves(const float* v, int64_t n, void* out, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
