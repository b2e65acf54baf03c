#pragma once
// The CUTLASS kernel behind conv_sums_cutlass.h, in a translation unit of its own (CUTLASS's
// headers, sm_90a code): the persistent GEMM for 1x1 convolutions of stride 1 without padding
// (conv_sums_gemm_cutlass.cu). It writes y and, per tile of kTileM output pixels, one row of
// partial per-channel sums and sums of squares (rows of padded_channels floats);
// conv_sums_cutlass.cu adds the rows.
#include <cuda_runtime.h>

#include <cstddef>

#include "ops/conv/conv_shape_cuda.h"

namespace kiln::cuda::cutlass_sums {

// A tile of kTileM output pixels by kTileN channels. 64 channels, not 128, for every width: with
// 128 the epilogue's per-thread partial sums no longer fit in registers (ptxas puts them on a
// 672-byte stack), and on the H200 the 128-wide GEMM took 1.37 ms for a 1x1 convolution of 64 to
// 256 channels at 56x56 (batch 256) where the 64-wide one takes a third of that.
constexpr int kTileM = 128, kTileN = 64;

inline int64_t padded_channels(const ConvShape& p) { return (p.k + kTileN - 1) / kTileN * kTileN; }
inline bool is_gemm(const ConvShape& p) { return p.r == 1 && p.s == 1 && p.stride == 1 && p.pad == 0; }

struct Launch {
  const void* x;
  const void* w;
  void* y;
  float* sum_rows;
  float* sq_rows;
  void* workspace;  // workspace_bytes of it
  cudaStream_t stream;
};

// Takes fp16/bf16 GEMM shapes whose channels suit TMA (the caller checks); `sms` is the GPU's
// multiprocessor count (the persistent GEMM's grid). gemm_launch returns null, or CUTLASS's status
// when it refused.
bool gemm_implementable(const ConvShape& p, int sms);
size_t gemm_workspace_bytes(const ConvShape& p, int sms);
const char* gemm_launch(const ConvShape& p, const Launch& l, int sms);

}  // namespace kiln::cuda::cutlass_sums
