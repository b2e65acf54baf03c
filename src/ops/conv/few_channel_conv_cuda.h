#pragma once
// Convolutions of inputs with few channels (a network's first layer: an RGB image, 1-8
// channels) in fp16/bf16 as implicit GEMMs on tensor cores. A block gathers the filter-sized
// patches of 128 output pixels into shared memory, one row of R*S*C values per pixel (zero
// beyond the image and up to a multiple of 16), and multiplies them with the filter through WMMA
// with fp32 accumulation.
//   forward: y = conv(x, w), and in the same pass the per-channel sum and sum of squares of y as
//            stored (rounded to the io dtype: the values BN normalizes). cuDNN 9.19 fuses those
//            sums into its convolution in fp16 only, and its bf16 plans for ResNet's stem (3
//            channels, 7x7, stride 2, batch 256) take 1.77 ms against 0.57 ms in fp16 (H200).
//   wgrad:   dW = the sum over output pixels of dY(pixel)^T * patch(pixel).
// Sums are taken per block in fp32 and the blocks' partials are added in a fixed order in fp64:
// the same bits on every run of a given GPU model. conv_stats_cuda.h and conv_wgrad_cuda.h use
// them only where, timed on the op's own tensors, they beat cuDNN.
// Layouts as conv_shape_cuda.h; the filter of k output channels is KRSC.
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "ops/conv/conv_shape_cuda.h"

namespace kiln::cuda {

// What the kernels take: io F16 or BF16, at most kFewChannelsMax input channels, 16, 32 or 64
// output channels (one block holds all of them) and R*S*C of at most kFewChannelsMaxPatch.
constexpr int kFewChannelsMax = 8;
constexpr int kFewChannelsMaxPatch = 256;
bool few_channel_conv_supported(const ConvShape& p);

// Scratch of each (the blocks' partials), 256-byte aligned. Queries the current device.
size_t few_channel_fprop_workspace_bytes(const ConvShape& p);
size_t few_channel_wgrad_workspace_bytes(const ConvShape& p);

// y = conv(x, w); sum[k] and sqsum[k] (fp32, k channels) of y as stored. Enqueued on `stream`.
void few_channel_fprop_stats(const ConvShape& p, const void* x, const void* w, void* y, float* sum, float* sqsum,
                             void* workspace, cudaStream_t stream, const std::string& where);
// dw = wgrad(x, dy), in the io dtype. Enqueued on `stream`.
void few_channel_wgrad(const ConvShape& p, const void* x, const void* dy, void* dw, void* workspace,
                       cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
