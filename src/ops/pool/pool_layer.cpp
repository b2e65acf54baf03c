// Max, average and global average pooling: no parameters, one op each way.
#include <algorithm>

#include "compile/layer_def.h"
#include "ops/pool/pool_contract.h"
#include "ops/pool/pool_cpu.h"

namespace kiln {
namespace {

// The windows along one axis (one padding on both sides: require_square_window): floor mode's
// through window_output, ceil mode's through the kernels' own rule (cpu::pool_output_size), which
// lets a window larger than the padded input start inside it, as PyTorch does.
int64_t pooled_size(const Layer& layer, int64_t size, int kernel, int stride, int pad, bool ceil_mode) {
  if (!ceil_mode) return window_output(layer, size, kernel, stride, pad, pad);
  const int64_t out = cpu::pool_output_size(size, kernel, stride, pad, true);
  if (out < 1)
    fail("{}: kernel {} with stride {} does not fit its padded input ({} + 2*{}) even in ceil mode; use a smaller "
         "kernel, more padding or a larger input",
         layer_label(layer), kernel, stride, size, pad);
  return out;
}

Shape infer_window(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_nhwc_input(layer, inputs);
  const PoolAttrs& a = attrs_of<PoolAttrs>(layer);
  require_square_window(layer, a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_top, a.pad_left, a.pad_bottom,
                        a.pad_right);
  return {x[0], pooled_size(layer, x[1], a.kernel_h, a.stride_h, a.pad_top, a.ceil_mode),
          pooled_size(layer, x[2], a.kernel_w, a.stride_w, a.pad_left, a.ceil_mode), x[3]};
}

// Max pooling saves a U8 window index per output (pool_cpu.h): a byte indexes a window of at most
// 16 x 16 positions.
Shape infer_max(const Layer& layer, const std::vector<Shape>& inputs) {
  const PoolAttrs& a = attrs_of<PoolAttrs>(layer);
  const int kernel = std::max(a.kernel_h, a.kernel_w);
  if (kernel > kMaxPoolMaxKernel)
    fail("{} '{}': kernel {} is too large; its backward saves the position of each window's maximum in a byte, "
         "so use a kernel of at most {}",
         layer_kind_name(layer.kind), layer.name, kernel, kMaxPoolMaxKernel);
  return infer_window(layer, inputs);
}

Shape infer_global(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_nhwc_input(layer, inputs);
  return {x[0], x[3]};
}

// Square windows padded alike on every side (infer_window refused any other).
PoolWindow window_of(const Layer& layer) {
  const PoolAttrs& a = attrs_of<PoolAttrs>(layer);
  return {a.kernel_h, a.stride_h, a.pad_top, a.ceil_mode};
}

void lower_forward_max(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  MaxPoolForward<TensorId> fwd;
  fwd.x = ctx.in(index, 0);
  fwd.y = ctx.activation(layer.name, layer.out_shape);
  fwd.argmax = ctx.activation(layer.name + ":argmax", layer.out_shape, DType::U8);
  fwd.window = window_of(layer);
  ctx.forward(make_op(fwd, index));
  ctx.save(index, fwd);
  ctx.set_out(index, fwd.y);
  MaxPoolInference<TensorId> inf;
  inf.x = ctx.infer_in(index, 0);
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  inf.window = fwd.window;
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.y);
}

void lower_backward_max(LowerContext& ctx, int index) {
  const int dx = ctx.grad_in(index, 0);
  if (dx < 0) return;
  const auto& f = ctx.saved<MaxPoolForward<TensorId>>(index);
  MaxPoolBackward<TensorId> bwd;
  bwd.dy = ctx.grad_out(index), bwd.argmax = f.argmax, bwd.dx = dx, bwd.window = f.window;
  ctx.backward(make_op(bwd, index));
}

// Average pools need nothing saved: the same op serves training and inference. The sliding
// one carries the layer's window and divisor rule, the global one none.
template <class Contract>
void set_window(Contract& c, const Layer& layer) {
  if constexpr (requires { c.window; }) {
    c.window = window_of(layer);
    c.count_include_pad = attrs_of<PoolAttrs>(layer).count_include_pad;
  }
}

template <template <class> class Fwd>
void lower_forward_avg(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  Fwd<TensorId> fwd;
  fwd.x = ctx.in(index, 0);
  fwd.y = ctx.activation(layer.name, layer.out_shape);
  set_window(fwd, layer);
  ctx.forward(make_op(fwd, index));
  ctx.set_out(index, fwd.y);
  Fwd<TensorId> inf = fwd;
  inf.x = ctx.infer_in(index, 0);
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.y);
}

template <template <class> class Bwd>
void lower_backward_avg(LowerContext& ctx, int index) {
  const int dx = ctx.grad_in(index, 0);
  if (dx < 0) return;
  Bwd<TensorId> bwd;
  bwd.dy = ctx.grad_out(index), bwd.dx = dx;
  set_window(bwd, ctx.layer(index));
  ctx.backward(make_op(bwd, index));
}

}  // namespace

extern const LayerDef kMaxPoolLayer{LayerKind::MaxPool, infer_max, lower_forward_max, lower_backward_max};
extern const LayerDef kAvgPoolLayer{LayerKind::AvgPool, infer_window, lower_forward_avg<AvgPoolForward>,
                                    lower_backward_avg<AvgPoolBackward>};
extern const LayerDef kGlobalAvgPoolLayer{LayerKind::GlobalAvgPool, infer_global, lower_forward_avg<GlobalAvgPoolForward>,
                                          lower_backward_avg<GlobalAvgPoolBackward>};

}  // namespace kiln
