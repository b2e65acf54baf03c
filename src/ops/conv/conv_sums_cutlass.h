#pragma once
// A 1x1 convolution of stride 1 that sums its own output: on CUTLASS's persistent Hopper GEMM (TMA
// loads, wgmma, fp32 accumulation: conv_sums_cutlass_kernels.h), with an epilogue that rounds each
// result to the io dtype, stores it, and adds it and its square into per-channel partial sums (one
// row of partials per 128 output pixels); a second kernel adds those rows in a fixed order in fp64.
// So y and the per-channel sum and sum of squares of y as stored (the values batch normalization
// reads) come from one pass over y instead of two, and, unlike cuDNN's statistics graphs (which
// finish their sums with atomics), the same bits on every run.
//
// Built from sm_90a code (wgmma), so it runs on compute capability 9.0 only; where CUTLASS's
// headers were not found at configure time (KILN_WITH_CUTLASS=0) it is never supported.
// conv_stats_cuda.h uses it where, timed at prepare on the op's own tensors, it is the fastest way.
// Layouts as conv_shape_cuda.h: x NHWC, w KRSC, y NHWC.
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "ops/conv/conv_shape_cuda.h"

namespace kiln::cuda {

// Whether this build has the kernels (CUTLASS's headers found, sm_90 among the architectures).
bool cutlass_kernels_built();

// fp16 or bf16, a 1x1 filter of stride 1 without padding (a GEMM), input and output channels
// multiples of 8 (TMA's 16-byte rows), a 32-bit pixel count, and a compute-capability 9.0 GPU as
// the current device. Other shapes are cuDNN's: CUTLASS 4.2's implicit-GEMM convolution, tried for
// them, took 1.5-2.5x cuDNN's convolution and sum kernel on every ResNet-50 and VGG16-BN shape and
// was retired (docs/results.md), while the GEMM beats cuDNN on some 1x1 shapes (ResNet-50's in bf16).
bool cutlass_fprop_sums_supported(const ConvShape& p);

// Scratch run needs (the partial sums), 256-byte aligned pieces.
size_t cutlass_fprop_sums_workspace_bytes(const ConvShape& p);

// y = conv(x, w); sum[k] and sqsum[k] (fp32) of y as stored. Enqueued on `stream`; kiln::Error
// naming `where` for a shape it does not take or a launch that fails.
void cutlass_fprop_sums(const ConvShape& p, const void* x, const void* w, void* y, float* sum, float* sqsum,
                        void* workspace, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
