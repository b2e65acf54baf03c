// bn_act_backward: BatchNorm's backward reduce and apply kernels (bn_backward_kernels_cuda.cuh)
// with a gate that multiplies dy by the activation's derivative at the recomputed pre-activation,
// so g = dy * act'(x * scale + shift) is formed in registers by both passes and never stored: the
// backward reads dy and x twice and writes dx once, where a separate gradient pass would add a
// read of both and a write and a read of g. A squeeze-and-excitation block's per-sample terms (the
// gate and its pool's gradient) join dy the same way, as the rows are loaded.
#include <type_traits>

#include "ops/batchnorm/bn_backward_kernels_cuda.cuh"
#include "ops/conv_bn_act/bn_act_cuda.h"
#include "ops/conv_bn_act/bn_act_functions.h"

namespace kiln::cuda {
namespace {

using namespace bn_parts;

// g = (dy * gate + pooled term) * F'(x * scale + shift), the pre-activation as bn_act_apply
// computes it; for ReLU a select, as the recomputed mask (a masked-out NaN or Inf in dy does not
// leak, as PyTorch's threshold_backward). The per-sample terms, where given, for the rows of sample
// n: dy * gate[n, c], rounded to T as the multiply's backward stores it, then
// dy_pooled[n, c] / rows_per_sample, rounded to T as GAP_BWD stores it, added in fp32 and rounded
// to T, the value a GRAD_SUM would have stored. Its 2 * VEC coefficients in registers take the
// recomputed ReLU mask's occupancy (2 blocks per SM).
template <class F, class T, int VEC>
struct ActivationGate {
  const float *scale, *shift;
  float alpha;
  const T *gate, *dy_pooled;
  int64_t rows_per_sample;
  static constexpr int kApplyBlocksPerSM = 2;
  static constexpr bool kTakesSecondTerm = false;
  struct Thread : ScaleShift<VEC> {
    float alpha;
    const T *gate, *dy_pooled;
    int64_t rows_per_sample, c, c0;
    template <class Rows>
    __device__ __forceinline__ void prepare(Rows& in, const LoadedRows& rows) const {
      if (!gate && !dy_pooled) return;
      const float area = float(rows_per_sample);
#pragma unroll
      for (int u = 0; u < int(sizeof(in.dy) / sizeof(in.dy[0])); ++u) {
        const int64_t r = rows.first + u * rows.step;
        if (r >= rows.end) continue;
        const int64_t at = (r / rows_per_sample) * c + c0;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          float d = to_float(in.dy[u].v[j]);
          if (gate) d = to_float(from_float<T>(d * to_float(gate[at + j])));
          if (dy_pooled) d = to_float(from_float<T>(d + to_float(from_float<T>(to_float(dy_pooled[at + j]) / area))));
          in.dy[u].v[j] = from_float<T>(d);
        }
      }
    }
    template <class Rows>
    __device__ __forceinline__ float g(const Rows& in, int u, int j) const {
      const float v = fmaf(to_float(in.x[u].v[j]), this->scale[j], this->shift[j]);
      const float dy = to_float(in.dy[u].v[j]);
      if constexpr (std::is_same_v<F, bn_act::ReLU>) return v > 0.f ? dy : 0.f;
      return dy * F::derivative(v, alpha);
    }
  };
  __device__ __forceinline__ const uint8_t* bits() const { return nullptr; }
  __device__ __forceinline__ Thread load(const TileThread& p, const TileGrid& g) const {
    Thread t;
    t.load(scale, shift, p);
    t.alpha = alpha, t.gate = gate, t.dy_pooled = dy_pooled, t.rows_per_sample = rows_per_sample;
    t.c = g.c, t.c0 = p.c0;
    return t;
  }
};

template <class T, int V, class Gate>
void backward_with(const Gate& gate, const BnActBackwardArgs& a, int64_t m, int64_t c, void* workspace,
                   size_t workspace_bytes, cudaStream_t stream, const std::string& where) {
  const auto* dy = static_cast<const T*>(a.dy);
  const auto* x = static_cast<const T*>(a.x);
  launch_bn_backward_reduce<T, V>("bn_act_backward", dy, static_cast<const T*>(nullptr), gate, x, a.saved_mean,
                                  a.saved_inv_std, m, c, a.dbeta, a.dgamma, workspace, workspace_bytes, stream, where);
  launch_bn_backward_apply<T, V>(dy, gate, x, a.gamma, a.saved_mean, a.saved_inv_std, a.dbeta, a.dgamma, m, c, m,
                                 static_cast<T*>(a.dx), stream, where);
}

}  // namespace

void bn_act_backward(DType dtype, int activation, float alpha, const BnActBackwardArgs& a, int64_t m, int64_t c,
                     void* workspace, size_t workspace_bytes, cudaStream_t stream, const std::string& where) {
  const char* fn = "bn_act_backward";
  check_shape(fn, m, c, where);
  need(fn, where,
       {{a.scale, "scale"},
        {a.shift, "shift"},
        {a.gamma, "gamma"},
        {a.saved_mean, "saved_mean"},
        {a.saved_inv_std, "saved_inv_std"},
        {a.dgamma, "dgamma"},
        {a.dbeta, "dbeta"}});
  if (m == 0) {
    KILN_CUDA(cudaMemsetAsync(a.dgamma, 0, c * sizeof(float), stream), where);
    KILN_CUDA(cudaMemsetAsync(a.dbeta, 0, c * sizeof(float), stream), where);
    return;
  }
  need(fn, where, {{a.dy, "dy"}, {a.x, "x"}, {a.dx, "dx"}});
  if ((a.gate || a.dy_pooled) && (a.rows_per_sample < 1 || m % a.rows_per_sample != 0))
    fail("{}: {} got {} rows per sample for the per-sample terms of {} rows; it must divide them", where, fn,
         a.rows_per_sample, m);
  with_tile_types(dtype, fn, c, {a.dy, a.x, a.dx}, [&](auto zero, auto vec) {
    using T = decltype(zero);
    constexpr int V = decltype(vec)::value;
    bn_act::visit(activation, [&](auto function) {
      using F = decltype(function);
      const ActivationGate<F, T, V> gate{a.scale, a.shift, alpha, static_cast<const T*>(a.gate),
                                         static_cast<const T*>(a.dy_pooled), a.rows_per_sample};
      backward_with<T, V>(gate, a, m, c, workspace, workspace_bytes, stream, where);
      return 0;
    });
  });
}

}  // namespace kiln::cuda
