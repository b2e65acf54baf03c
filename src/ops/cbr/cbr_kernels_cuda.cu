#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/cbr/cbr_cuda_kernels.h"
#include "ops/common/flat_cuda.cuh"
#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {

struct BitsToBytes {
  const uint8_t* bits;
  uint8_t* bytes;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    const unsigned b = bits[i0 >> 3];  // i0 is a multiple of 8: one whole mask byte
    uint8_t out[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = (b >> j) & 1u;
    store8(bytes, i0, n, vec, out);
  }
};

}  // namespace

void cbr_apply_relu_bitmask(DType dtype, const void* conv_out, const float* scale,
                            const float* shift, int64_t m, int64_t c, void* y, uint8_t* bitmask,
                            cudaStream_t stream, const std::string& where) {
  if (m > 0 && !bitmask)
    fail("{}: cbr_apply_relu_bitmask needs the device pointer 'bitmask', got nullptr", where);
  bn_apply(dtype, conv_out, scale, shift, m, c, /*relu=*/true, y, bitmask, /*bytemask=*/nullptr,
           stream, where);
}

size_t cbr_backward_workspace_bytes(int64_t m, int64_t c) {
  return bn_backward_reduce_workspace_bytes(m, c);
}

namespace {
void need_mask(const ReluMask& mask, int64_t m, const char* fn, const std::string& where) {
  if (m > 0 && !mask.bits && !mask.recomputed())
    fail("{}: {} needs the forward's ReLU bits (the device pointer 'bitmask') or its scale and shift to recompute "
         "them from, got neither",
         where, fn);
}
}  // namespace

void cbr_backward_reduce(DType dtype, const void* dy, ReluMask mask, const void* conv_out,
                         const float* saved_mean, const float* saved_inv_std, int64_t m, int64_t c,
                         float* dgamma, float* dbeta, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream, const std::string& where) {
  need_mask(mask, m, "cbr_backward_reduce", where);
  // Reads dy, mask, conv_out: dbeta = sum g, dgamma = sum g * xhat.
  bn_backward_reduce(dtype, dy, nullptr, mask, conv_out, saved_mean, saved_inv_std, m, c, dbeta, dgamma,
                     workspace, workspace_bytes, stream, where);
}

void cbr_backward_apply(DType dtype, const void* dy, ReluMask mask, const void* conv_out,
                        const float* gamma, const float* saved_mean, const float* saved_inv_std,
                        const float* dgamma, const float* dbeta, int64_t m, int64_t c, int64_t row0,
                        int64_t rows, void* dconv, cudaStream_t stream, const std::string& where) {
  need_mask(mask, m, "cbr_backward_apply", where);
  if (row0 < 0 || rows < 0 || row0 + rows > m || (row0 * c) % 8 != 0)
    fail("{}: cbr_backward_apply got rows [{}, {}) of {} with {} channels; the slice must lie in the "
         "tensor and start on a whole mask byte (row0 * c a multiple of 8)",
         where, row0, row0 + rows, m, c);
  const size_t offset = size_t(row0 * c) * dtype_size(dtype);
  auto at = [&](const void* p) { return static_cast<const std::byte*>(p) + offset; };
  bn_backward_apply(dtype, at(dy), mask.from_element(row0 * c), at(conv_out), gamma, saved_mean,
                    saved_inv_std, dbeta, dgamma, rows, c, m,
                    static_cast<std::byte*>(dconv) + offset, stream, where);
}

void cbr_backward(DType dtype, const void* dy, const uint8_t* bitmask, const void* conv_out,
                  const float* gamma, const float* saved_mean, const float* saved_inv_std,
                  int64_t m, int64_t c, void* dconv, float* dgamma, float* dbeta, void* workspace,
                  size_t workspace_bytes, cudaStream_t stream, const std::string& where) {
  cbr_backward_reduce(dtype, dy, bitmask, conv_out, saved_mean, saved_inv_std, m, c, dgamma, dbeta,
                      workspace, workspace_bytes, stream, where);
  cbr_backward_apply(dtype, dy, bitmask, conv_out, gamma, saved_mean, saved_inv_std, dgamma, dbeta,
                     m, c, 0, m, dconv, stream, where);
}

void cbr_bitmask_to_bytes(const uint8_t* bitmask, int64_t numel, uint8_t* bytes,
                          cudaStream_t stream, const std::string& where) {
  if (numel < 0) fail("{}: cbr_bitmask_to_bytes got numel = {}; it must be >= 0", where, numel);
  if (numel == 0) return;
  if (!bitmask || !bytes)
    fail("{}: cbr_bitmask_to_bytes needs device pointers for the bit mask and the bytes", where);
  launch_flat(BitsToBytes{bitmask, bytes}, numel, flat_vectorizable({}, {bytes}), stream, where);
}

}  // namespace kiln::cuda
