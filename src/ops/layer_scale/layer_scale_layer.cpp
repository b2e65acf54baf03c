// A learned per-channel multiply, torchvision ConvNeXt's `self.layer_scale * self.block(input)`:
// y = gamma[c] * x on a channels-last map (N, H, W, C), or on flat rows (N, C). Its one parameter
// is `<layer>.layer_scale`, shaped as PyTorch's: (C, 1, 1) for a map, so that a layer named as
// torchvision's block ("features.1.0") carries its state_dict's name and shape and its weights move
// as they are; (C) for rows, as PyTorch's factor for an (N, C) input would be. It starts at
// LayerScaleAttrs::init_value (ConvNeXt: 1e-6). In mixed precision the ops read the fp32 master
// itself (no fp16/bf16 copy, as BatchNorm's gamma) and write its gradient in fp32.
//
// One LAYER_SCALE_FWD; one LAYER_SCALE_BWD for dx (unless x is the data batch) and dgamma, which
// reads x, so the memory plan keeps x alive until it has run. In CUDA programs the backward's
// two-stage sum gets its fp32 workspace here (layer_scale_partials.h): the op allocates nothing.
#include <string>

#include "compile/layer_def.h"
#include "ops/layer_scale/layer_scale_contract.h"
#include "ops/layer_scale/layer_scale_partials.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_input(layer, inputs);
  if (x.size() != 4 && x.size() != 2)
    fail("layer_scale '{}': scales the channels of a feature map (N,H,W,C) or of flat features (N,C) but its input "
         "is {}; put it after a layer that gives one of them",
         layer.name, shape_str(x));
  return x;
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const int64_t c = layer.out_shape.back();
  const Shape gamma_shape = layer.out_shape.size() == 4 ? Shape{c, 1, 1} : Shape{c};
  LayerScaleForward<TensorId> f;
  f.x = ctx.in(index, 0);
  f.gamma = ctx.param(layer.name + ".layer_scale", gamma_shape, Init::Constant);
  ctx.program.tensors[size_t(int(f.gamma))].init_value = attrs_of<LayerScaleAttrs>(layer).init_value;
  f.y = ctx.activation(layer.name, layer.out_shape);
  ctx.forward(make_op(f, index));
  ctx.set_out(index, f.y);
  ctx.save(index, f);

  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(make_op(LayerScaleForward<TensorId>{ctx.infer_in(index, 0), f.gamma, yi}, index));
  ctx.set_infer_out(index, yi);
}

void lower_backward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const auto& f = ctx.saved<LayerScaleForward<TensorId>>(index);
  LayerScaleBackward<TensorId> b;
  b.dy = ctx.grad_out(index);
  b.x = f.x, b.gamma = f.gamma;
  b.dx = ctx.grad_in(index, 0);
  b.dgamma = ctx.grad_of(f.gamma);
  if (ctx.program.options.device == Device::CUDA) {
    const int64_t c = layer.out_shape.back(), rows = numel(layer.out_shape) / c;
    b.partials = ctx.activation(layer.name + ":dgamma_partials", {layer_scale_partial_chunks(rows), c}, DType::F32);
  }
  ctx.backward(make_op(b, index));
}

}  // namespace

extern const LayerDef kLayerScaleLayer{LayerKind::LayerScale, infer, lower_forward, lower_backward};

}  // namespace kiln
