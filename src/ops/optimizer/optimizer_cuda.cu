#include <cmath>
#include <initializer_list>
#include <type_traits>

#include "ops/common/flat_cuda.cuh"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/optimizer/optimizer_cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

// Where a group of 8 elements takes its gradients and leaves its rounded copy (ComputeCopies):
// C is the compute dtype's element type, void without compute tensors. A group never straddles
// the prefix's end (a multiple of 8), so each group reads one region.
template <class C>
struct GradSource {
  const float* fp32;  // elements [shift, n), shift = prefix where `compute` is given, else 0
  const C* compute;   // elements [0, prefix); nullptr: none
  C* copy;            // elements [0, prefix); nullptr: none
  int64_t prefix;
  __device__ __forceinline__ void load(int64_t i0, int64_t n, bool vec, float (&g)[8]) const {
    if constexpr (!std::is_void_v<C>) {
      if (compute) {
        if (i0 < prefix) return load8(compute, i0, prefix, vec, g);
        return load8(fp32, i0 - prefix, n - prefix, vec, g);
      }
    }
    load8(fp32, i0, n, vec, g);
  }
  __device__ __forceinline__ void store_copy(int64_t i0, bool vec, const float (&p)[8]) const {
    if constexpr (!std::is_void_v<C>) {
      if (copy && i0 < prefix) store8(copy, i0, prefix, vec, p);
    }
  }
};

// Loss scaling: false when the step is skipped; else `inv` is what gradients are multiplied by.
__device__ __forceinline__ bool take_step(const LossScaleInputs& scaling, float& inv) {
  if (scaling.found_nonfinite && *scaling.found_nonfinite != 0) return false;
  inv = scaling.scale ? 1.f / *scaling.scale : 1.f;
  return true;
}

template <class C>
struct Sgd {
  GradSource<C> grad;
  float* param;
  float* buf;  // nullptr: no momentum
  SgdScalars host;
  const SgdScalars* dev;
  LossScaleInputs scaling;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float inv;
    if (!take_step(scaling, inv)) return;
    const SgdScalars s = dev ? *dev : host;
    float g[8], p[8], b[8];
    grad.load(i0, n, vec, g);
    load8(param, i0, n, vec, p);
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] *= inv;
    if (s.weight_decay != 0.f) {
#pragma unroll
      for (int j = 0; j < 8; ++j) g[j] += s.weight_decay * p[j];
    }
    if (buf) {
      load8(buf, i0, n, vec, b);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        b[j] = s.momentum * b[j] + g[j];
        g[j] = s.nesterov ? g[j] + s.momentum * b[j] : b[j];
      }
      store8(buf, i0, n, vec, b);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) p[j] -= s.lr * g[j];
    store8(param, i0, n, vec, p);
    grad.store_copy(i0, vec, p);
  }
};

template <class C>
struct AdamW {
  GradSource<C> grad;
  float* param;
  float* m;
  float* v;
  AdamWScalars host;
  const AdamWScalars* dev;
  LossScaleInputs scaling;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float inv;
    if (!take_step(scaling, inv)) return;
    const AdamWScalars s = dev ? *dev : host;
    float g[8], p[8], mi[8], vi[8];
    grad.load(i0, n, vec, g);
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] *= inv;
    load8(param, i0, n, vec, p);
    load8(m, i0, n, vec, mi);
    load8(v, i0, n, vec, vi);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      mi[j] = s.beta1 * mi[j] + s.one_minus_beta1 * g[j];
      vi[j] = s.beta2 * vi[j] + s.one_minus_beta2 * g[j] * g[j];
      const float denom = sqrtf(vi[j]) / s.bias2_sqrt + s.eps;
      p[j] = p[j] * s.keep - s.step_size * (mi[j] / denom);
    }
    store8(m, i0, n, vec, mi);
    store8(v, i0, n, vec, vi);
    store8(param, i0, n, vec, p);
    grad.store_copy(i0, vec, p);
  }
};

void check_regions(const char* fn, int64_t n, std::initializer_list<const void*> required,
                   const std::string& where) {
  if (n < 0) fail("{}: {} got n = {} parameters; n must be >= 0", where, fn, n);
  for (const void* p : required)
    if (n > 0 && !p)
      fail(
          "{}: {} got a nullptr region (gradient, parameter or optimizer state); bind every "
          "region of the update",
          where, fn);
}

// The gradients: the compute prefix within [0, n) at a group boundary, and an fp32 region
// wherever the compute gradients do not cover every element.
void check_gradients(const char* fn, int64_t n, const float* grad, const ComputeCopies& compute,
                     const std::string& where) {
  const int64_t prefix = compute.prefix;
  if (prefix < 0 || prefix > n) fail("{}: {} got a compute prefix of {} elements of {}", where, fn, prefix, n);
  if (prefix % 8 != 0 && prefix != n)
    fail("{}: {} got a compute prefix of {} elements, not a multiple of 8 (nor all {})", where, fn, prefix, n);
  if ((compute.grad || compute.param) && prefix == 0)
    fail("{}: {} got compute tensors for an empty prefix", where, fn);
  const int64_t fp32_elements = compute.grad ? n - prefix : n;
  if (fp32_elements > 0 && !grad)
    fail("{}: {} got no fp32 gradients for the {} elements the compute gradients do not cover", where, fn,
         fp32_elements);
}

// The host's sgd_scalars / adamw_scalars, on one thread, from device-resident lr and step
// (the same fp64 formulas, so a replayed step updates as an uncaptured one does).
__global__ void derive_sgd_kernel(const float* lr, float momentum, float weight_decay, int nesterov, SgdScalars* out) {
  *out = SgdScalars{*lr, momentum, weight_decay, nesterov};
}

__global__ void derive_adamw_kernel(const float* lr, const int64_t* step, double beta1, double beta2, double eps,
                                    double weight_decay, AdamWScalars* out) {
  const double rate = *lr, t = static_cast<double>(*step + 1);
  AdamWScalars s;
  s.keep = static_cast<float>(1 - rate * weight_decay);
  s.beta1 = static_cast<float>(beta1), s.one_minus_beta1 = static_cast<float>(1 - beta1);
  s.beta2 = static_cast<float>(beta2), s.one_minus_beta2 = static_cast<float>(1 - beta2);
  s.step_size = static_cast<float>(rate / (1 - pow(beta1, t)));
  s.bias2_sqrt = static_cast<float>(sqrt(1 - pow(beta2, t)));
  s.eps = static_cast<float>(eps);
  *out = s;
}

// Calls f(GradSource<C>) with the compute tensors' element type C, or C = void without them.
template <class F>
void dispatch_compute(const float* grad, const ComputeCopies& compute, const char* fn, F&& f) {
  if (!compute.grad && !compute.param) return f(GradSource<void>{grad, nullptr, nullptr, 0});
  dispatch_activation(compute.dtype, fn, [&](auto zero) {
    using C = decltype(zero);
    f(GradSource<C>{grad, static_cast<const C*>(compute.grad), static_cast<C*>(compute.param), compute.prefix});
  });
}

}  // namespace

SgdScalars sgd_scalars(double lr, double momentum, double weight_decay, bool nesterov) {
  return SgdScalars{static_cast<float>(lr), static_cast<float>(momentum),
                    static_cast<float>(weight_decay), nesterov ? 1 : 0};
}

AdamWScalars adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                           int64_t step) {
  if (step < 1) fail("adamw_scalars: step {} must be >= 1 (it counts this update)", step);
  const double t = static_cast<double>(step);
  AdamWScalars s;
  s.keep = static_cast<float>(1 - lr * weight_decay);
  s.beta1 = static_cast<float>(beta1), s.one_minus_beta1 = static_cast<float>(1 - beta1);
  s.beta2 = static_cast<float>(beta2), s.one_minus_beta2 = static_cast<float>(1 - beta2);
  s.step_size = static_cast<float>(lr / (1 - std::pow(beta1, t)));
  s.bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(beta2, t)));
  s.eps = static_cast<float>(eps);
  return s;
}

void derive_sgd_scalars(const float* lr, double momentum, double weight_decay, bool nesterov, SgdScalars* out,
                        cudaStream_t stream, const std::string& where) {
  // Rounded to float as sgd_scalars rounds them.
  derive_sgd_kernel<<<1, 1, 0, stream>>>(lr, static_cast<float>(momentum), static_cast<float>(weight_decay),
                                         nesterov ? 1 : 0, out);
  KILN_CUDA(cudaGetLastError(), where);
}

void derive_adamw_scalars(const float* lr, const int64_t* step, double beta1, double beta2, double eps,
                          double weight_decay, AdamWScalars* out, cudaStream_t stream, const std::string& where) {
  derive_adamw_kernel<<<1, 1, 0, stream>>>(lr, step, beta1, beta2, eps, weight_decay, out);
  KILN_CUDA(cudaGetLastError(), where);
}

void sgd_update(int64_t n, const float* grad, float* param, float* momentum_buf,
                const SgdScalars& s, cudaStream_t stream, const std::string& where,
                const SgdScalars* device_scalars, ComputeCopies compute, LossScaleInputs scaling) {
  check_regions("sgd_update", n, {param}, where);
  check_gradients("sgd_update", n, grad, compute, where);
  if ((s.momentum != 0.f) != (momentum_buf != nullptr))
    fail(
        "{}: sgd_update got momentum {} {} a momentum buffer; the buffer is needed exactly when "
        "momentum != 0",
        where, s.momentum, momentum_buf ? "with" : "without");
  dispatch_compute(grad, compute, "sgd_update (compute copies)", [&](auto source) {
    using C = std::remove_const_t<std::remove_pointer_t<decltype(source.compute)>>;
    Sgd<C> op{source, param, momentum_buf, s, device_scalars, scaling};
    launch_flat(op, n, flat_vectorizable({grad, param, momentum_buf, compute.grad, compute.param}), stream, where);
  });
}

void adamw_update(int64_t n, const float* grad, float* param, float* exp_avg, float* exp_avg_sq,
                  const AdamWScalars& s, cudaStream_t stream, const std::string& where,
                  const AdamWScalars* device_scalars, ComputeCopies compute, LossScaleInputs scaling) {
  check_regions("adamw_update", n, {param, exp_avg, exp_avg_sq}, where);
  check_gradients("adamw_update", n, grad, compute, where);
  dispatch_compute(grad, compute, "adamw_update (compute copies)", [&](auto source) {
    using C = std::remove_const_t<std::remove_pointer_t<decltype(source.compute)>>;
    AdamW<C> op{source, param, exp_avg, exp_avg_sq, s, device_scalars, scaling};
    launch_flat(op, n, flat_vectorizable({grad, param, exp_avg, exp_avg_sq, compute.grad, compute.param}), stream,
                where);
  });
}

void copy_master_params(int64_t n, const float* master, DType dtype, void* copy,
                        cudaStream_t stream, const std::string& where) {
  cast(DType::F32, master, dtype, copy, n, stream, where);
}

}  // namespace kiln::cuda
