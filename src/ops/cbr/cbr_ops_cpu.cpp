// Op wrappers for the fused CBR kernels: check the bound tensors against the layer's geometry
// (naming the layer and tensor at fault), then dispatch on dtype.
#include <string>

#include "ops/cbr/cbr_contract.h"
#include "ops/cbr/cbr_cpu.h"
#include "ops/common/cpu_op_checker.h"
#include "ops/conv/conv_cpu.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

using cpu::ConvGeom;
using Checker = CpuOpChecker;

void cbr_fwd(const OpCall& call, const CbrForward<TensorArg>& a) {
  const Checker check{call, "CBR_FWD"};
  const TensorArg &x = a.x, &w = a.w, &gamma = a.gamma, &beta = a.beta;
  const TensorArg &conv_out = a.conv_out, &y = a.y, &mean = a.saved_mean, &inv_std = a.saved_inv_std,
                  &bits = a.bitmask, &rmean = a.running_mean, &rvar = a.running_var;
  const ConvGeom g = check.geometry(x, w, a.stride, a.padding);
  const DType dt = check.activation_dtype(x);
  const Shape out_shape{g.n, g.ho, g.wo, g.k};
  check.dtype(w, dt, "weight");
  check.shape(conv_out, out_shape, "output");
  check.dtype(conv_out, dt, "output");
  // A seam's producer writes scale and shift instead of y and the bit mask (cbr_contract.h).
  const bool producer = !y;
  if (producer) {
    if (bits || !a.scale || !a.shift)
      fail("CBR_FWD layer '{}': without 'y' the op writes 'scale' and 'shift' and no 'bitmask'; the program binds "
           "them otherwise (recompile it)", check.layer);
    check.per_channel(a.scale, g.k, dt, "scale");
    check.per_channel(a.shift, g.k, dt, "shift");
  } else {
    check.shape(y, out_shape, "output");
    check.dtype(y, dt, "output");
    check.shape(bits, {cpu::cbr_mask_bytes(numel(out_shape))}, "bitmask");
    check.dtype(bits, DType::U8, "bitmask");
  }
  check.seam_input(a.in_scale, a.in_shift, a.x_applied, x, g.c, dt);
  check.per_channel(gamma, g.k, dt, "gamma");
  check.per_channel(beta, g.k, dt, "beta");
  check.per_channel(mean, g.k, dt, "saved_mean");
  check.per_channel(inv_std, g.k, dt, "saved_inv_std");
  check.per_channel(rmean, g.k, dt, "running_mean");
  check.per_channel(rvar, g.k, dt, "running_var");
  check.batch_statistics(g.n * g.ho * g.wo);
  dispatch_float(dt, "CBR_FWD", [&](auto zero) {
    using T = decltype(zero);
    cpu::CbrForwardTensors<T> t;
    t.x = x.as<T>(), t.w = w.as<T>(), t.gamma = gamma.as<T>(), t.beta = beta.as<T>();
    t.conv_out = conv_out.as<T>(), t.y = y.as<T>();
    t.saved_mean = mean.as<T>(), t.saved_inv_std = inv_std.as<T>();
    t.bitmask = bits.as<uint8_t>();
    t.running_mean = rmean.as<T>(), t.running_var = rvar.as<T>();
    t.scale = a.scale.as<T>(), t.shift = a.shift.as<T>();
    t.in_scale = a.in_scale.as<T>(), t.in_shift = a.in_shift.as<T>(), t.x_applied = a.x_applied.as<T>();
    cpu::cbr_forward<T>(g, t, a.eps, a.momentum);
  });
}

// CBR_BWD and CBR_BWD_FIRST share the contract; only CBR_BWD computes (and needs) dx.
void cbr_bwd_impl(const OpCall& call, const CbrBackward<TensorArg>& a, const char* op, bool first_layer) {
  const Checker check{call, op};
  const TensorArg &dy = a.dy, &bits = a.bitmask, &conv_out = a.conv_out, &x = a.x, &w = a.w, &gamma = a.gamma,
                  &mean = a.saved_mean, &inv_std = a.saved_inv_std;
  const TensorArg &dw = a.dw, &dgamma = a.dgamma, &dbeta = a.dbeta, &dconv = a.dconv;
  const TensorArg* dx = nullptr;
  if (!first_layer) {
    if (!a.dx)
      fail(
          "{} layer '{}': output 'dx' is not bound; the program must give {} its input gradient "
          "(only CBR_BWD_FIRST, the first layer's backward, has none)",
          op, check.layer, op);
    dx = &a.dx;
  }
  const ConvGeom g = check.geometry(x, w, a.stride, a.padding);
  const DType dt = check.activation_dtype(x);
  const Shape out_shape{g.n, g.ho, g.wo, g.k};
  for (const auto* t : {&dy, &conv_out, &dconv}) {
    check.shape(*t, out_shape, "tensor");
    check.dtype(*t, dt, "tensor");
  }
  if (bits) {
    check.shape(bits, {cpu::cbr_mask_bytes(numel(out_shape))}, "bitmask");
    check.dtype(bits, DType::U8, "bitmask");
  } else {  // a seam's producer: the mask is recomputed from scale and shift
    if (!a.scale || !a.shift)
      fail("{} layer '{}': without 'bitmask' the op needs 'scale' and 'shift' to recompute the ReLU mask; the "
           "program binds neither (recompile it)", op, check.layer);
    check.per_channel(a.scale, g.k, dt, "scale");
    check.per_channel(a.shift, g.k, dt, "shift");
  }
  check.seam_input(a.in_scale, a.in_shift, a.x_applied, x, g.c, dt);
  check.shape(dw, w.shape(), "dw");
  check.dtype(dw, dt, "dw");
  check.dtype(w, dt, "weight");
  if (dx) {
    check.shape(*dx, x.shape(), "dx");
    check.dtype(*dx, dt, "dx");
  }
  check.per_channel(gamma, g.k, dt, "gamma");
  check.per_channel(mean, g.k, dt, "saved_mean");
  check.per_channel(inv_std, g.k, dt, "saved_inv_std");
  check.per_channel(dgamma, g.k, dt, "dgamma");
  check.per_channel(dbeta, g.k, dt, "dbeta");
  dispatch_float(dt, op, [&](auto zero) {
    using T = decltype(zero);
    cpu::CbrBackwardTensors<T> t;
    t.dy = dy.as<T>(), t.bitmask = bits.as<uint8_t>(), t.conv_out = conv_out.as<T>();
    t.x = x.as<T>(), t.w = w.as<T>(), t.gamma = gamma.as<T>();
    t.saved_mean = mean.as<T>(), t.saved_inv_std = inv_std.as<T>();
    t.dx = dx ? dx->as<T>() : nullptr;
    t.dw = dw.as<T>(), t.dgamma = dgamma.as<T>(), t.dbeta = dbeta.as<T>();
    t.dconv = dconv.as<T>();
    t.scale = a.scale.as<T>(), t.shift = a.shift.as<T>();
    t.in_scale = a.in_scale.as<T>(), t.in_shift = a.in_shift.as<T>(), t.x_applied = a.x_applied.as<T>();
    cpu::cbr_backward<T>(g, t);
  });
}

void cbr_bwd(const OpCall& call, const CbrBackward<TensorArg>& a) { cbr_bwd_impl(call, a, "CBR_BWD", false); }
void cbr_bwd_first(const OpCall& call, const CbrBackward<TensorArg>& a) {
  cbr_bwd_impl(call, a, "CBR_BWD_FIRST", true);
}

void cbr_inf(const OpCall& call, const CbrInference<TensorArg>& a) {
  const Checker check{call, "CBR_INF"};
  const TensorArg &x = a.x, &w = a.w, &gamma = a.gamma, &beta = a.beta, &rmean = a.running_mean,
                  &rvar = a.running_var;
  const TensorArg& y = a.y;
  const ConvGeom g = check.geometry(x, w, a.stride, a.padding);
  const DType dt = check.activation_dtype(x);
  check.dtype(w, dt, "weight");
  check.shape(y, {g.n, g.ho, g.wo, g.k}, "y");
  check.dtype(y, dt, "y");
  check.per_channel(gamma, g.k, dt, "gamma");
  check.per_channel(beta, g.k, dt, "beta");
  check.per_channel(rmean, g.k, dt, "running_mean");
  check.per_channel(rvar, g.k, dt, "running_var");
  dispatch_float(dt, "CBR_INF", [&](auto zero) {
    using T = decltype(zero);
    cpu::cbr_inference<T>(g, x.as<T>(), w.as<T>(), gamma.as<T>(), beta.as<T>(), rmean.as<T>(),
                          rvar.as<T>(), a.eps, y.as<T>());
  });
}

// When the program is prepared: the convolution passes each op runs, made ready (conv_cpu.h).
void cbr_fwd_prepare(const OpCall& call, const CbrForward<TensorArg>& a) {
  const Checker check{call, "CBR_FWD"};
  call.backend->request_workspace(
      cpu::conv_prepare(check.geometry(a.x, a.w, a.stride, a.padding), a.x.dtype(), false, {.forward = true}));
}
void cbr_bwd_prepare(const OpCall& call, const CbrBackward<TensorArg>& a) {
  const Checker check{call, "CBR_BWD"};
  call.backend->request_workspace(cpu::conv_prepare(check.geometry(a.x, a.w, a.stride, a.padding), a.x.dtype(), false,
                                                    {.dgrad = bool(a.dx), .wgrad = true}));
}
void cbr_inf_prepare(const OpCall& call, const CbrInference<TensorArg>& a) {
  const Checker check{call, "CBR_INF"};
  call.backend->request_workspace(
      cpu::conv_prepare(check.geometry(a.x, a.w, a.stride, a.padding), a.x.dtype(), false, {.forward = true}));
}

}  // namespace

namespace ops {
extern const OpTable cbr_cpu_ops{Device::CPU,
                                 {kernel<CbrForward, cbr_fwd, cbr_fwd_prepare>(),
                                  kernel<CbrBackward, cbr_bwd, cbr_bwd_prepare>(),
                                  kernel<CbrBackward, cbr_bwd_first, cbr_bwd_prepare>(OpKind::CBR_BWD_FIRST),
                                  kernel<CbrInference, cbr_inf, cbr_inf_prepare>()}};
}  // namespace ops

}  // namespace kiln
