#include "compile/layer_def.h"

#include <cmath>

namespace kiln {

const LayerDef& layer_def(LayerKind kind) {
  for (const LayerDef* def : all_layer_defs())
    if (def->kind == kind) return *def;
  fail("internal: layer kind '{}' has no lowering", layer_kind_name(kind));
}

const Shape& single_input(const Layer& layer, const std::vector<Shape>& inputs) {
  if (inputs.size() != 1)
    fail("{} '{}': expects 1 input, got {}", layer_kind_name(layer.kind), layer.name, inputs.size());
  return inputs[0];
}

const Shape& single_nhwc_input(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_input(layer, inputs);
  if (x.size() != 4)
    fail("{} '{}': needs a feature map (N,H,W,C) but its input is {}; move it before flatten/fc",
         layer_kind_name(layer.kind), layer.name, shape_str(x));
  return x;
}

int64_t window_output(const Layer& layer, int64_t size, int kernel, int stride, int pad_before, int pad_after) {
  if (size + pad_before + pad_after < kernel) {
    const std::string padded = pad_before == pad_after ? fmt::format("{} + 2*{}", size, pad_before)
                                                       : fmt::format("{} + {} + {}", size, pad_before, pad_after);
    fail("{}: kernel {} is larger than its padded input ({}); use a smaller kernel, more padding or a larger input",
         layer_label(layer), kernel, padded);
  }
  return (size + pad_before + pad_after - kernel) / stride + 1;
}

void require_square_window(const Layer& layer, int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_top,
                           int pad_left, int pad_bottom, int pad_right) {
  if (kernel_h != kernel_w)
    fail("{}: kernel {}x{} (kernel_h x kernel_w) is not supported: kiln's kernels run square kernels only; use "
         "kernel_h == kernel_w",
         layer_label(layer), kernel_h, kernel_w);
  if (stride_h != stride_w)
    fail("{}: stride {}x{} (stride_h x stride_w) is not supported: kiln's kernels run one stride for both axes; "
         "use stride_h == stride_w",
         layer_label(layer), stride_h, stride_w);
  if (pad_top != pad_bottom || pad_left != pad_right || pad_top != pad_left)
    fail("{}: padding (top, left, bottom, right) {}, {}, {}, {} is not supported: kiln's kernels pad all four sides "
         "alike; use one padding",
         layer_label(layer), pad_top, pad_left, pad_bottom, pad_right);
}

Shape conv_output_shape(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_nhwc_input(layer, inputs);
  const ConvAttrs& a = attrs_of<ConvAttrs>(layer);
  if (x[3] % a.groups != 0)
    fail("{}: groups {} does not divide its {} input channels; use a number of groups that divides both the input "
         "and the output channels",
         layer_label(layer), a.groups, x[3]);
  const int extent_h = int(ConvWindow::extent(a.kernel_h, a.dilation_h));
  const int extent_w = int(ConvWindow::extent(a.kernel_w, a.dilation_w));
  return {x[0], window_output(layer, x[1], extent_h, a.stride_h, a.pad_top, a.pad_bottom),
          window_output(layer, x[2], extent_w, a.stride_w, a.pad_left, a.pad_right), a.out_channels};
}

ConvWindow conv_window(const ConvAttrs& a) {
  return {a.stride_h, a.stride_w, a.pad_top, a.pad_left, a.pad_bottom, a.pad_right, a.dilation_h, a.dilation_w,
          a.groups};
}

bool is_fusable_conv(const ConvAttrs& a) { return a.kernel_h == a.kernel_w && conv_window(a).is_square(); }

bool fused_ops_run(const ConvAttrs& a, const CompileOptions& options) {
  const bool mixed = options.precision == Precision::FP16 || options.precision == Precision::BF16;
  if (options.device == Device::CUDA && mixed && a.out_channels % 8 != 0) return false;
  return is_fusable_conv(a);
}

void require_fusable_window(const Layer& layer) {
  const ConvAttrs& a = attrs_of<ConvAttrs>(layer);
  if (is_fusable_conv(a)) return;
  fail("{}: the fused convolution + BatchNorm ops run a square kernel, one stride, one padding on every side, "
       "dilation 1 and groups 1 only (this one has kernel {}x{}, stride {}x{}, padding {},{},{},{}, dilation {}x{}, "
       "groups {}); write conv(), bn() and the activation as separate layers",
       layer_label(layer), a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_top, a.pad_left, a.pad_bottom, a.pad_right, a.dilation_h,
       a.dilation_w, a.groups);
}

int weight_param(LowerContext& ctx, const std::string& name, const Shape& shape, const WeightInit& init,
                 int64_t fan_in, int64_t fan_out, bool compute_copy) {
  if (init == WeightInit::kaiming_normal_fan_out())
    return ctx.param(name, shape, Init::KaimingNormalFanOut, fan_in, fan_out, compute_copy);
  if (init == WeightInit::torch_default()) return ctx.param(name, shape, Init::UniformFanIn, fan_in, fan_out, compute_copy);
  using W = WeightInit;
  const Init program_init = init.draw == W::Draw::Normal            ? Init::Normal
                            : init.draw == W::Draw::TruncatedNormal ? Init::TruncatedNormal
                                                                    : Init::Uniform;
  const int64_t fan = init.fan == W::Fan::In ? fan_in : init.fan == W::Fan::Out ? fan_out : 1;
  const int id = ctx.param(name, shape, program_init, fan_in, fan_out, compute_copy);
  ctx.program.tensors[id].init_value = init.gain / std::sqrt(double(fan));
  return id;
}

int bias_param(LowerContext& ctx, const std::string& name, const Shape& shape, BiasInit init, int64_t fan_in,
               bool compute_copy) {
  return ctx.param(name, shape, init == BiasInit::TorchDefault ? Init::UniformFanIn : Init::Zeros, fan_in, 0,
                   compute_copy);
}

ConvBnParams declare_conv_bn_params(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const ConvAttrs& a = attrs_of<ConvAttrs>(layer);
  // Each filter reads its group's C / groups input channels, also its fan-in (as the Conv layer).
  const int64_t c = ctx.program.tensors[ctx.in(index, 0)].shape[3] / a.groups;
  const int64_t k = a.out_channels, rs = int64_t(a.kernel_h) * a.kernel_w;
  const Shape kc = {k};
  ConvBnParams p;
  // The family's initializer (a fused convolution has no bias).
  p.weight = weight_param(ctx, layer.conv_name + ".weight", {k, a.kernel_h, a.kernel_w, c}, a.init, c * rs, k * rs,
                          /*compute_copy=*/true);
  p.w = ctx.compute_param(p.weight);
  p.gamma = ctx.param(layer.bn_name + ".weight", kc, Init::Ones);
  p.beta = ctx.param(layer.bn_name + ".bias", kc, Init::Zeros);
  p.running_mean = ctx.buffer(layer.bn_name + ".running_mean", kc, Init::Zeros);
  p.running_var = ctx.buffer(layer.bn_name + ".running_var", kc, Init::Ones);
  return p;
}

}  // namespace kiln
