// bn_act_backward: BatchNorm's backward reduce and apply kernels (bn_backward_kernels_cuda.cuh)
// with a gate that multiplies dy by the activation's derivative at the recomputed pre-activation,
// so g = dy * act'(x * scale + shift) is formed in registers by both passes and never stored: the
// backward reads dy and x twice and writes dx once, where a separate gradient pass would add a
// read of both and a write and a read of g.
#include "ops/batchnorm/bn_backward_kernels_cuda.cuh"
#include "ops/conv_bn_act/bn_act_cuda.h"
#include "ops/conv_bn_act/bn_act_functions.h"

namespace kiln::cuda {
namespace {

using namespace bn_parts;

// g = dy * F'(x * scale + shift), the pre-activation as bn_act_apply computes it. Its 2 * VEC
// coefficients in registers take the recomputed ReLU mask's occupancy (2 blocks per SM).
template <class F, int VEC>
struct ActivationGate {
  const float *scale, *shift;
  float alpha;
  static constexpr int kApplyBlocksPerSM = 2;
  static constexpr bool kTakesSecondTerm = false;
  struct Thread : ScaleShift<VEC> {
    float alpha;
    template <class Rows>
    __device__ __forceinline__ void prepare(Rows&) const {}
    template <class Rows>
    __device__ __forceinline__ float g(const Rows& in, int u, int j) const {
      const float v = fmaf(to_float(in.x[u].v[j]), this->scale[j], this->shift[j]);
      return to_float(in.dy[u].v[j]) * F::derivative(v, alpha);
    }
  };
  __device__ __forceinline__ const uint8_t* bits() const { return nullptr; }
  __device__ __forceinline__ Thread load(const TileThread& p) const {
    Thread t;
    t.load(scale, shift, p);
    t.alpha = alpha;
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
  with_tile_types(dtype, fn, c, {a.dy, a.x, a.dx}, [&](auto zero, auto vec) {
    using T = decltype(zero);
    constexpr int V = decltype(vec)::value;
    // ReLU as the recomputed mask BatchNorm's own kernels use: a select, so a masked-out NaN or
    // Inf in dy does not leak, as PyTorch's threshold_backward.
    if (activation == bn_act::kReluCode)
      return backward_with<T, V>(RecomputedReluGate<V>{a.scale, a.shift}, a, m, c, workspace, workspace_bytes, stream,
                                 where);
    bn_act::visit(activation, [&](auto function) {
      using F = decltype(function);
      backward_with<T, V>(ActivationGate<F, V>{a.scale, a.shift, alpha}, a, m, c, workspace, workspace_bytes, stream,
                          where);
      return 0;
    });
  });
}

}  // namespace kiln::cuda
