#include "ops/optimizer/rmsprop_cuda.h"

#include <type_traits>

#include "ops/common/flat_cuda.cuh"
#include "ops/optimizer/update_parts_cuda.cuh"

namespace kiln::cuda {
namespace {

// One group of 8 elements: the state loaded, the gradient unscaled and decayed, the state and the
// parameter (and its copy) written back.
template <class C>
struct Rmsprop {
  GradSource<C> grad;
  float* param;
  float* square_avg;
  float* buf;  // nullptr: no momentum
  float* avg;  // nullptr: not centered
  RmspropScalars s;
  const float* device_lr;
  LossScaleInputs scaling;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float inv;
    if (!take_step(scaling, inv)) return;
    const float lr = device_lr ? *device_lr : s.lr;
    float g[8], p[8], v[8], a[8] = {}, b[8] = {};
    grad.load(i0, n, vec, g);
    load8(param, i0, n, vec, p);
    load8(square_avg, i0, n, vec, v);
    if (avg) load8(avg, i0, n, vec, a);
    if (buf) load8(buf, i0, n, vec, b);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float gj = g[j] * inv;
      if (s.weight_decay != 0.f) gj += s.weight_decay * p[j];
      v[j] = s.alpha * v[j] + s.one_minus_alpha * gj * gj;
      float d;
      if (avg) {
        a[j] = s.alpha * a[j] + s.one_minus_alpha * gj;
        d = sqrtf(v[j] - a[j] * a[j]) + s.eps;
      } else {
        d = sqrtf(v[j]) + s.eps;
      }
      if (buf) {
        b[j] = s.momentum * b[j] + gj / d;
        p[j] -= lr * b[j];
      } else {
        p[j] -= lr * (gj / d);
      }
    }
    store8(square_avg, i0, n, vec, v);
    if (avg) store8(avg, i0, n, vec, a);
    if (buf) store8(buf, i0, n, vec, b);
    store8(param, i0, n, vec, p);
    grad.store_copy(i0, vec, p);
  }
};

}  // namespace

RmspropScalars rmsprop_scalars(double lr, double alpha, double eps, double weight_decay, double momentum) {
  return RmspropScalars{static_cast<float>(lr),  static_cast<float>(alpha),        static_cast<float>(1 - alpha),
                        static_cast<float>(eps), static_cast<float>(weight_decay), static_cast<float>(momentum)};
}

void rmsprop_update(int64_t n, const float* grad, float* param, float* square_avg, float* momentum_buf,
                    float* grad_avg, const RmspropScalars& s, cudaStream_t stream, const std::string& where,
                    const float* device_lr, ComputeCopies compute, LossScaleInputs scaling) {
  check_regions("rmsprop_update", n, {param, square_avg}, where);
  check_gradients("rmsprop_update", n, grad, compute, where);
  if ((s.momentum != 0.f) != (momentum_buf != nullptr))
    fail("{}: rmsprop_update got momentum {} {} a momentum buffer; the buffer is needed exactly when momentum != 0",
         where, s.momentum, momentum_buf ? "with" : "without");
  dispatch_compute(grad, compute, "rmsprop_update (compute copies)", [&](auto source) {
    using C = std::remove_const_t<std::remove_pointer_t<decltype(source.compute)>>;
    Rmsprop<C> op{source, param, square_avg, momentum_buf, grad_avg, s, device_lr, scaling};
    const bool vec = flat_vectorizable({grad, param, square_avg, momentum_buf, grad_avg, compute.grad, compute.param});
    launch_flat(op, n, vec, stream, where);
  });
}

}  // namespace kiln::cuda
