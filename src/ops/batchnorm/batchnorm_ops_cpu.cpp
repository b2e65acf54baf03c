// BN_FWD_TRAIN / BN_BWD / BN_INF on the CPU: check the bound tensors against the input's (M, C)
// view (naming the layer and tensor at fault), then dispatch on dtype to batchnorm_cpu.cpp.
#include <initializer_list>
#include <utility>

#include "ops/batchnorm/batchnorm_contract.h"
#include "ops/batchnorm/batchnorm_cpu.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

struct BnShape {
  int64_t M, C;
};

// Views x as (M, C) with C = last dim.
BnShape bn_shape(const OpCall& call, const TensorArg& x) {
  const Shape& s = x.shape();
  if (s.empty() || s.back() <= 0)
    fail("batchnorm '{}': input shape {} has no channel dimension; BatchNorm needs (..., C)",
         call.layer().name, shape_str(s));
  return {x.numel() / s.back(), s.back()};
}

// Full tensors have x's numel, per-channel vectors C; all share x's dtype.
void check_tensor(const OpCall& call, const TensorArg& t, const char* role, int64_t numel,
                  DType dtype) {
  if (t.numel() != numel)
    fail("batchnorm '{}': {} has shape {} ({} elements) but {} are needed; the program's tensors "
         "do not match the layer, recompile it",
         call.layer().name, role, shape_str(t.shape()), t.numel(), numel);
  if (t.dtype() != dtype)
    fail("batchnorm '{}': {} is {} but the input is {}; BatchNorm on CPU keeps all its tensors in "
         "the input's dtype",
         call.layer().name, role, dtype_name(t.dtype()), dtype_name(dtype));
}

using Role = std::pair<const char*, const TensorArg*>;

// Checks every tensor of `roles` against x: the first `full` of them have x's numel, the rest C.
void check_tensors(const OpCall& call, const TensorArg& x, BnShape d, size_t full,
                   std::initializer_list<Role> roles) {
  size_t i = 0;
  for (const Role& r : roles) check_tensor(call, *r.second, r.first, i++ < full ? x.numel() : d.C, x.dtype());
}

void bn_fwd_train(const OpCall& call, const BnForwardTrain<TensorArg>& a) {
  const TensorArg& x = a.x;
  BnShape d = bn_shape(call, x);
  check_tensors(call, x, d, 1, {{"x", &a.x}, {"gamma", &a.gamma}, {"beta", &a.beta}});
  check_tensors(call, x, d, 1,
                {{"y", &a.y},
                 {"saved_mean", &a.saved_mean},
                 {"saved_inv_std", &a.saved_inv_std},
                 {"running_mean", &a.running_mean},
                 {"running_var", &a.running_var}});
  if (d.M < 2)
    fail("batchnorm '{}': training needs more than one value per channel, got input shape {}; "
         "use a batch (or feature map) with more than one element per channel",
         call.layer().name, shape_str(x.shape()));
  dispatch_float(x.dtype(), "BN_FWD_TRAIN", [&](auto t) {
    using T = decltype(t);
    cpu::bn_forward_train<T>(x.as<T>(), a.gamma.as<T>(), a.beta.as<T>(), d.M, d.C, a.eps, a.momentum,
                             a.y.as<T>(), a.saved_mean.as<T>(), a.saved_inv_std.as<T>(),
                             a.running_mean.as<T>(), a.running_var.as<T>());
  });
}

void bn_bwd(const OpCall& call, const BnBackward<TensorArg>& a) {
  const TensorArg& x = a.x;
  BnShape d = bn_shape(call, x);
  check_tensors(call, x, d, 2,
                {{"dy", &a.dy},
                 {"x", &a.x},
                 {"gamma", &a.gamma},
                 {"saved_mean", &a.saved_mean},
                 {"saved_inv_std", &a.saved_inv_std}});
  check_tensors(call, x, d, 1, {{"dx", &a.dx}, {"dgamma", &a.dgamma}, {"dbeta", &a.dbeta}});
  dispatch_float(x.dtype(), "BN_BWD", [&](auto t) {
    using T = decltype(t);
    cpu::bn_backward<T>(a.dy.as<T>(), x.as<T>(), a.gamma.as<T>(), a.saved_mean.as<T>(),
                        a.saved_inv_std.as<T>(), d.M, d.C, a.dx.as<T>(), a.dgamma.as<T>(),
                        a.dbeta.as<T>());
  });
}

void bn_inf(const OpCall& call, const BnInference<TensorArg>& a) {
  const TensorArg& x = a.x;
  BnShape d = bn_shape(call, x);
  check_tensors(call, x, d, 1,
                {{"x", &a.x},
                 {"gamma", &a.gamma},
                 {"beta", &a.beta},
                 {"running_mean", &a.running_mean},
                 {"running_var", &a.running_var}});
  check_tensor(call, a.y, "y", x.numel(), x.dtype());
  dispatch_float(x.dtype(), "BN_INF", [&](auto t) {
    using T = decltype(t);
    cpu::bn_inference<T>(x.as<T>(), a.gamma.as<T>(), a.beta.as<T>(), a.running_mean.as<T>(),
                         a.running_var.as<T>(), d.M, d.C, a.eps, a.y.as<T>());
  });
}

}  // namespace

namespace ops {
extern const OpTable batchnorm_cpu_ops{Device::CPU,
                                       {kernel<BnForwardTrain, bn_fwd_train>(), kernel<BnBackward, bn_bwd>(),
                                        kernel<BnInference, bn_inf>()}};
}  // namespace ops

}  // namespace kiln
