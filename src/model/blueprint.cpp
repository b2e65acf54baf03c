#include "kiln/blueprint.h"

#include <cmath>

#include "kiln/error.h"

namespace kiln {

Blueprint::Blueprint(std::string name) : name_(std::move(name)) {}

Blueprint& Blueprint::add(LayerKind kind, LayerAttrs attrs, std::string name,
                          std::vector<Blueprint> children) {
  nodes_.push_back({kind, std::move(name), std::move(attrs), std::move(children)});
  return *this;
}

// Values are checked by the compiler (which knows the layer's full name), not here, so a
// blueprint can be assembled freely and every problem is reported with its place in the model.
Blueprint& Blueprint::conv(int out_channels, int kernel, int stride, int padding, bool bias,
                           std::string name) {
  return conv(ConvAttrs::square(out_channels, kernel, stride, padding, bias), std::move(name));
}

Blueprint& Blueprint::conv(const ConvAttrs& attrs, std::string name) {
  return add(LayerKind::Conv, attrs, std::move(name));
}

Blueprint& Blueprint::bn(std::string name, float eps, float momentum) {
  return add(LayerKind::BatchNorm, BatchNormAttrs{eps, momentum}, std::move(name));
}

Blueprint& Blueprint::relu(std::string name) { return add(LayerKind::ReLU, {}, std::move(name)); }

Blueprint& Blueprint::activation(Activation a, float alpha, std::string name) {
  return add(LayerKind::Activation, ActivationAttrs{a, alpha}, std::move(name));
}
Blueprint& Blueprint::relu6(std::string name) { return activation(Activation::ReLU6, 0.f, std::move(name)); }
Blueprint& Blueprint::leaky_relu(float negative_slope, std::string name) {
  return activation(Activation::LeakyReLU, negative_slope, std::move(name));
}
Blueprint& Blueprint::elu(float alpha, std::string name) { return activation(Activation::ELU, alpha, std::move(name)); }
Blueprint& Blueprint::silu(std::string name) { return activation(Activation::SiLU, 0.f, std::move(name)); }
Blueprint& Blueprint::hardswish(std::string name) { return activation(Activation::Hardswish, 0.f, std::move(name)); }
Blueprint& Blueprint::gelu(bool tanh_approximation, std::string name) {
  return activation(tanh_approximation ? Activation::GELUTanh : Activation::GELU, 0.f, std::move(name));
}
Blueprint& Blueprint::sigmoid(std::string name) { return activation(Activation::Sigmoid, 0.f, std::move(name)); }
Blueprint& Blueprint::tanh(std::string name) { return activation(Activation::Tanh, 0.f, std::move(name)); }

Blueprint& Blueprint::cbr(int out_channels, int kernel, int stride, int padding, std::string name) {
  return cbr(ConvBnAttrs{ConvAttrs::square(out_channels, kernel, stride, padding), BatchNormAttrs{}}, std::move(name));
}

Blueprint& Blueprint::cbr(const ConvBnAttrs& attrs, std::string name) {
  return add(LayerKind::CBR, attrs, std::move(name));
}

Blueprint& Blueprint::conv_bn_relu(int out_channels, int kernel, int stride, int padding,
                                   std::string name) {
  return cbr(out_channels, kernel, stride, padding, std::move(name));
}

Blueprint& Blueprint::maxpool(int kernel, int stride, int padding, std::string name) {
  return maxpool(PoolAttrs::square(kernel, stride, padding), std::move(name));
}

Blueprint& Blueprint::avgpool(int kernel, int stride, int padding, std::string name) {
  return avgpool(PoolAttrs::square(kernel, stride, padding), std::move(name));
}

Blueprint& Blueprint::maxpool(const PoolAttrs& attrs, std::string name) {
  return add(LayerKind::MaxPool, attrs, std::move(name));
}

Blueprint& Blueprint::avgpool(const PoolAttrs& attrs, std::string name) {
  return add(LayerKind::AvgPool, attrs, std::move(name));
}

Blueprint& Blueprint::global_avgpool(std::string name) {
  return add(LayerKind::GlobalAvgPool, {}, std::move(name));
}

Blueprint& Blueprint::flatten(std::string name) { return add(LayerKind::Flatten, {}, std::move(name)); }

Blueprint& Blueprint::fc(int out_features, bool bias, std::string name, float init_std) {
  if (!(init_std >= 0.f) || !std::isfinite(init_std))
    fail("fc layer '{}': init_std {} must be finite and >= 0 (0: PyTorch's default init)", name, init_std);
  return fc(LinearAttrs{out_features, bias, init_std}, std::move(name));
}

Blueprint& Blueprint::fc(const LinearAttrs& attrs, std::string name) {
  return add(LayerKind::Linear, attrs, std::move(name));
}

Blueprint& Blueprint::dropout(float p, std::string name) {
  return add(LayerKind::Dropout, DropoutAttrs{p}, std::move(name));
}

Blueprint& Blueprint::seq(const Blueprint& inner, std::string name) {
  return add(LayerKind::Sequence, {}, name.empty() ? inner.name() : std::move(name), {inner});
}

Blueprint& Blueprint::residual(const Blueprint& body, std::optional<Blueprint> shortcut,
                               bool relu_after, std::string name) {
  std::vector<Blueprint> children{body};
  if (shortcut) children.push_back(*shortcut);
  return add(LayerKind::Residual, ResidualAttrs{relu_after}, std::move(name), std::move(children));
}

Blueprint& Blueprint::input(int height, int width, int channels) {
  input_hwc_ = Shape{height, width, channels};
  return *this;
}

}  // namespace kiln
