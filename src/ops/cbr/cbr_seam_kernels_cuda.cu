#include <cuda_fp16.h>

#include "ops/cbr/cbr_seam_kernels_cuda.h"
#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {

__global__ void to_halves_kernel(const float* v, int64_t n, __half* out) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = __float2half_rn(v[i]);
}

void check(const void* in, const void* out, int64_t n, const char* fn, const std::string& where) {
  if (n < 0 || (n > 0 && (!in || !out)))
    fail("{}: {} got n = {} with device pointers {} and {}; n must be >= 0 and both pointers set", where, fn, n, in,
         out);
}

unsigned blocks(int64_t n) { return static_cast<unsigned>((n + 255) / 256); }

}  // namespace

void floats_to_halves(const float* v, int64_t n, void* out, cudaStream_t stream, const std::string& where) {
  check(v, out, n, "floats_to_halves", where);
  if (n == 0) return;
  to_halves_kernel<<<blocks(n), 256, 0, stream>>>(v, n, static_cast<__half*>(out));
  check_launch(where);
}

}  // namespace kiln::cuda
