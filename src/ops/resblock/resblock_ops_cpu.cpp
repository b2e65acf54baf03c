// The fused ResNet block ends on the CPU: check the bound tensors against the layer's geometry
// (naming the layer and tensor at fault), then dispatch on dtype to resblock_cpu.cpp.
#include "ops/cbr/cbr_cpu.h"
#include "ops/common/cpu_op_checker.h"
#include "ops/conv/conv_cpu.h"
#include "ops/resblock/resblock_contract.h"
#include "ops/resblock/resblock_cpu.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

using cpu::ConvGeom;

Shape out_shape(const ConvGeom& g) { return {g.n, g.ho, g.wo, g.k}; }

void conv_bn_fwd(const OpCall& call, const ConvBnForward<TensorArg>& a) {
  const CpuOpChecker check{call, "CONV_BN_FWD"};
  const ConvGeom g = check.geometry(a.x, a.w, a.stride, a.padding);
  const DType dt = check.activation_dtype(a.x);
  check.dtype(a.w, dt, "weight");
  check.like(a.conv_out, out_shape(g), dt, "conv_out");
  for (const auto* t : {&a.gamma, &a.beta, &a.saved_mean, &a.saved_inv_std, &a.scale, &a.shift, &a.running_mean,
                        &a.running_var})
    check.per_channel(*t, g.k, dt, "per-channel tensor");
  check.batch_statistics(g.n * g.ho * g.wo);
  check.seam_input(a.in_scale, a.in_shift, a.x_applied, a.x, g.c, dt);
  dispatch_float(dt, "CONV_BN_FWD", [&](auto zero) {
    using T = decltype(zero);
    cpu::ConvBnForwardTensors<T> t;
    t.x = cpu::cbr_seam_input(g, a.x.as<T>(), a.in_scale.as<T>(), a.in_shift.as<T>(), a.x_applied.as<T>());
    t.w = a.w.as<T>(), t.gamma = a.gamma.as<T>(), t.beta = a.beta.as<T>();
    t.conv_out = a.conv_out.as<T>(), t.saved_mean = a.saved_mean.as<T>(), t.saved_inv_std = a.saved_inv_std.as<T>();
    t.scale = a.scale.as<T>(), t.shift = a.shift.as<T>();
    t.running_mean = a.running_mean.as<T>(), t.running_var = a.running_var.as<T>();
    cpu::conv_bn_forward<T>(g, t, a.eps, a.momentum);
  });
}

void conv_bn_inf(const OpCall& call, const ConvBnInference<TensorArg>& a) {
  const CpuOpChecker check{call, "CONV_BN_INF"};
  const ConvGeom g = check.geometry(a.x, a.w, a.stride, a.padding);
  const DType dt = check.activation_dtype(a.x);
  check.dtype(a.w, dt, "weight");
  check.like(a.conv_out, out_shape(g), dt, "conv_out");
  for (const auto* t : {&a.gamma, &a.beta, &a.running_mean, &a.running_var, &a.scale, &a.shift})
    check.per_channel(*t, g.k, dt, "per-channel tensor");
  dispatch_float(dt, "CONV_BN_INF", [&](auto zero) {
    using T = decltype(zero);
    cpu::conv_bn_inference<T>(g, a.x.as<T>(), a.w.as<T>(), a.gamma.as<T>(), a.beta.as<T>(), a.running_mean.as<T>(),
                              a.running_var.as<T>(), a.eps, a.conv_out.as<T>(), a.scale.as<T>(), a.shift.as<T>());
  });
}

void conv_bn_bwd(const OpCall& call, const ConvBnBackward<TensorArg>& a) {
  const CpuOpChecker check{call, "CONV_BN_BWD"};
  const ConvGeom g = check.geometry(a.x, a.w, a.stride, a.padding);
  const DType dt = check.activation_dtype(a.x);
  check.dtype(a.w, dt, "weight");
  check.like(a.dconv, out_shape(g), dt, "dconv");
  check.like(a.dw, a.w.shape(), dt, "dw");
  if (a.dx) check.like(a.dx, a.x.shape(), dt, "dx");
  check.seam_input(a.in_scale, a.in_shift, a.x_applied, a.x, g.c, dt);
  dispatch_float(dt, "CONV_BN_BWD", [&](auto zero) {
    using T = decltype(zero);
    const T* x = cpu::cbr_seam_input(g, a.x.as<T>(), a.in_scale.as<T>(), a.in_shift.as<T>(), a.x_applied.as<T>());
    cpu::conv_bn_backward<T>(g, a.dconv.as<T>(), x, a.w.as<T>(), a.dw.as<T>(), a.dx ? a.dx.as<T>() : nullptr);
  });
}

// Rows and channels of the tail's (N, H, W, C) tensors, after checking that they agree.
struct Rows {
  int64_t m, c;
};
Rows tail_rows(const CpuOpChecker& check, const TensorArg& a) {
  if (a.shape().size() != 4)
    fail("{} layer '{}': 'a' has shape {}, but a block end works on (N, H, W, C) feature maps; recompile the program",
         check.op, check.layer, shape_str(a.shape()));
  return {a.numel() / a.shape().back(), a.shape().back()};
}

void bn_add_relu(const OpCall& call, const BnAddRelu<TensorArg>& a) {
  const bool training = call.op.kind == OpKind::BN_ADD_RELU_FWD;
  const CpuOpChecker check{call, training ? "BN_ADD_RELU_FWD" : "BN_ADD_RELU_INF"};
  const DType dt = check.activation_dtype(a.a);
  const Rows r = tail_rows(check, a.a);
  check.like(a.b, a.a.shape(), dt, "shortcut b");
  check.like(a.y, a.a.shape(), dt, "y");
  check.per_channel(a.scale_a, r.c, dt, "scale_a");
  check.per_channel(a.shift_a, r.c, dt, "shift_a");
  if (bool(a.scale_b) != bool(a.shift_b))
    fail("{}: scale_b and shift_b come together (a normalized shortcut) or not at all (identity); recompile the program",
         call.where());
  if (a.scale_b) {
    check.per_channel(a.scale_b, r.c, dt, "scale_b");
    check.per_channel(a.shift_b, r.c, dt, "shift_b");
  }
  if (training && !a.bitmask)
    fail("{}: the training forward needs its 'bitmask' output for the backward; recompile the program",
         call.where());
  if (a.bitmask) check.bitmask(a.bitmask, r.m * r.c);
  dispatch_float(dt, "BN_ADD_RELU", [&](auto zero) {
    using T = decltype(zero);
    cpu::bn_add_relu_forward<T>(a.a.as<T>(), a.scale_a.as<T>(), a.shift_a.as<T>(), a.b.as<T>(), a.scale_b.as<T>(),
                                a.shift_b.as<T>(), r.m, r.c, a.y.as<T>(), a.bitmask.as<uint8_t>());
  });
}

void bn_add_relu_bwd(const OpCall& call, const BnAddReluBackward<TensorArg>& a) {
  const CpuOpChecker check{call, "BN_ADD_RELU_BWD"};
  const DType dt = check.activation_dtype(a.a);
  const Rows r = tail_rows(check, a.a);
  check.like(a.dy, a.a.shape(), dt, "dy");
  if (a.dy2) {
    check.like(a.dy2, a.a.shape(), dt, "dy2");
    if (!a.db)
      fail("{}: the gradient's second term 'dy2' comes only with the shortcut's gradient 'db'; recompile the program",
           call.where());
  }
  check.like(a.da, a.a.shape(), dt, "da");
  check.bitmask(a.bitmask, r.m * r.c);
  for (const auto* t : {&a.gamma_a, &a.saved_mean_a, &a.saved_inv_std_a, &a.dgamma_a, &a.dbeta_a})
    check.per_channel(*t, r.c, dt, "branch a per-channel tensor");
  const TensorArg* branch_b[] = {&a.b, &a.gamma_b, &a.saved_mean_b, &a.saved_inv_std_b, &a.dgamma_b, &a.dbeta_b};
  int present = 0;
  for (const TensorArg* t : branch_b) present += bool(*t);
  if (present != 0 && present != 6)
    fail("{}: the normalized shortcut's tensors (b, gamma_b, saved statistics, dgamma_b, dbeta_b) come together or "
         "not at all, got {} of 6; recompile the program",
         call.where(), present);
  if (present) {
    if (!a.db) fail("{}: a normalized shortcut needs its gradient 'db'; recompile the program", call.where());
    check.like(a.b, a.a.shape(), dt, "shortcut b");
    for (const TensorArg* t : branch_b)
      if (t != &a.b) check.per_channel(*t, r.c, dt, "branch b per-channel tensor");
  }
  if (a.db) check.like(a.db, a.a.shape(), dt, "db");
  dispatch_float(dt, "BN_ADD_RELU_BWD", [&](auto zero) {
    using T = decltype(zero);
    cpu::BnAddReluBackwardTensors<T> t;
    t.dy = a.dy.as<T>(), t.dy2 = a.dy2.as<T>(), t.bitmask = a.bitmask.as<uint8_t>();
    t.a = a.a.as<T>(), t.gamma_a = a.gamma_a.as<T>(), t.saved_mean_a = a.saved_mean_a.as<T>();
    t.saved_inv_std_a = a.saved_inv_std_a.as<T>();
    t.b = a.b.as<T>(), t.gamma_b = a.gamma_b.as<T>(), t.saved_mean_b = a.saved_mean_b.as<T>();
    t.saved_inv_std_b = a.saved_inv_std_b.as<T>();
    t.da = a.da.as<T>(), t.dgamma_a = a.dgamma_a.as<T>(), t.dbeta_a = a.dbeta_a.as<T>();
    t.db = a.db.as<T>(), t.dgamma_b = a.dgamma_b.as<T>(), t.dbeta_b = a.dbeta_b.as<T>();
    cpu::bn_add_relu_backward<T>(t, r.m, r.c);
  });
}

// When the program is prepared: the convolution passes each op runs, made ready (conv_cpu.h).
void conv_bn_fwd_prepare(const OpCall& call, const ConvBnForward<TensorArg>& a) {
  const CpuOpChecker check{call, "CONV_BN_FWD"};
  call.backend->request_workspace(
      cpu::conv_prepare(check.geometry(a.x, a.w, a.stride, a.padding), a.x.dtype(), false, {.forward = true}));
}
void conv_bn_inf_prepare(const OpCall& call, const ConvBnInference<TensorArg>& a) {
  const CpuOpChecker check{call, "CONV_BN_INF"};
  call.backend->request_workspace(
      cpu::conv_prepare(check.geometry(a.x, a.w, a.stride, a.padding), a.x.dtype(), false, {.forward = true}));
}
void conv_bn_bwd_prepare(const OpCall& call, const ConvBnBackward<TensorArg>& a) {
  const CpuOpChecker check{call, "CONV_BN_BWD"};
  call.backend->request_workspace(cpu::conv_prepare(check.geometry(a.x, a.w, a.stride, a.padding), a.x.dtype(), false,
                                                    {.dgrad = bool(a.dx), .wgrad = true}));
}

}  // namespace

namespace ops {
extern const OpTable resblock_cpu_ops{Device::CPU,
                                      {kernel<ConvBnForward, conv_bn_fwd, conv_bn_fwd_prepare>(),
                                       kernel<ConvBnInference, conv_bn_inf, conv_bn_inf_prepare>(),
                                       kernel<ConvBnBackward, conv_bn_bwd, conv_bn_bwd_prepare>(),
                                       kernel<BnAddRelu, bn_add_relu>(),
                                       kernel<BnAddRelu, bn_add_relu>(OpKind::BN_ADD_RELU_INF),
                                       kernel<BnAddReluBackward, bn_add_relu_bwd>()}};
}  // namespace ops

}  // namespace kiln
