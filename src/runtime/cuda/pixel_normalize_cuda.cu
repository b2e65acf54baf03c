#include "runtime/cuda/pixel_normalize_cuda.h"

namespace kiln {
namespace {

// Four pixels' bytes (one 32-bit load) per thread where the count allows; the channel of value i
// is i % channels.
__global__ void normalize_pixels_kernel(float* __restrict__ dst, const uint8_t* __restrict__ pixels, int64_t count,
                                        PixelNormalization n) {
  const int64_t first = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (first >= count) return;
  uint8_t v[4];
  if (first + 4 <= count && (reinterpret_cast<uintptr_t>(pixels + first) & 3) == 0) {
    const uint32_t word = *reinterpret_cast<const uint32_t*>(pixels + first);
    for (int k = 0; k < 4; ++k) v[k] = uint8_t(word >> (8 * k));
  } else {
    for (int k = 0; k < 4 && first + k < count; ++k) v[k] = pixels[first + k];
  }
  for (int k = 0; k < 4 && first + k < count; ++k) {
    const int c = int((first + k) % n.channels);
    dst[first + k] = __fadd_rn(__fmul_rn(float(v[k]), n.scale[c]), n.bias[c]);
  }
}

}  // namespace

void launch_normalize_pixels(float* dst, const uint8_t* pixels, int64_t count, const PixelNormalization& n,
                             cudaStream_t stream) {
  if (count <= 0) return;
  constexpr int kThreads = 256;
  const int64_t threads = (count + 3) / 4;
  const unsigned blocks = unsigned((threads + kThreads - 1) / kThreads);
  normalize_pixels_kernel<<<blocks, kThreads, 0, stream>>>(dst, pixels, count, n);
}

}  // namespace kiln
