#include "kiln/blueprint.h"

#include <atomic>
#include <cmath>

#include "kiln/error.h"

namespace kiln {
namespace {

std::uint64_t new_blueprint_id() {
  static std::atomic<std::uint64_t> next{1};
  return next++;
}

}  // namespace

Blueprint::Blueprint(std::string name) : name_(std::move(name)), id_(new_blueprint_id()) {}

Blueprint& Blueprint::append(LayerKind kind, LayerAttrs attrs, std::string name, std::vector<Blueprint> children) {
  std::vector<int> inputs;
  if (next_input_) inputs.push_back(*next_input_);
  next_input_.reset();
  nodes_.push_back({kind, std::move(name), std::move(attrs), std::move(children), std::move(inputs)});
  return *this;
}

Blueprint::Ref Blueprint::last() const { return Ref(id_, int(nodes_.size()) - 1); }

Blueprint::Ref Blueprint::source() const { return Ref(id_, -1); }

// Where a handle goes wrong is only known here: a node keeps the index alone, which would silently
// read this blueprint's node of that number.
void Blueprint::check_own(const Ref& r, const char* call) const {
  if (r.blueprint_ != id_)
    fail("blueprint '{}': {}() at node {} was given a handle (to node {}) made by another blueprint; handles index "
         "the nodes of the blueprint whose last() or source() made them: take them from '{}' (for a seq() or "
         "residual() node, its last() after it)",
         name_, call, nodes_.size(), r.node_, name_);
}

Blueprint& Blueprint::from(Ref r) {
  check_own(r, "from");
  if (next_input_)
    fail("blueprint '{}': from() twice before node {}; the first one would be read by no node: keep one", name_,
         nodes_.size());
  next_input_ = r.node_;
  return *this;
}

Blueprint& Blueprint::add(Ref a, Ref b, std::string name) {
  check_own(a, "add");
  check_own(b, "add");
  if (next_input_)
    fail("blueprint '{}': from() before add() at node {}; add() reads its own two handles: drop the from()", name_,
         nodes_.size());
  append(LayerKind::Add, {}, std::move(name));
  nodes_.back().inputs = {a.node_, b.node_};
  return *this;
}

Blueprint& Blueprint::mul(Ref a, Ref b, std::string name) {
  check_own(a, "mul");
  check_own(b, "mul");
  if (next_input_)
    fail("blueprint '{}': from() before mul() at node {}; mul() reads its own two handles: drop the from()", name_,
         nodes_.size());
  append(LayerKind::Mul, {}, std::move(name));
  nodes_.back().inputs = {a.node_, b.node_};
  return *this;
}

Blueprint& Blueprint::concat(std::vector<Ref> inputs, std::string name) {
  for (const Ref& r : inputs) check_own(r, "concat");
  // An empty list would read as "the node before" (a node's empty inputs), one input is a copy.
  if (inputs.size() < 2)
    fail("blueprint '{}': concat() at node {} got {} handle(s); it joins two or more: pass them all, "
         "e.g. concat({{a, b}})",
         name_, nodes_.size(), inputs.size());
  if (next_input_)
    fail("blueprint '{}': from() before concat() at node {}; concat() reads its own handles: drop the from()",
         name_, nodes_.size());
  append(LayerKind::Concat, {}, std::move(name));
  nodes_.back().inputs.clear();
  for (const Ref& r : inputs) nodes_.back().inputs.push_back(r.node_);
  return *this;
}

// Values are checked by the compiler (which knows the layer's full name), not here, so a
// blueprint can be assembled freely and every problem is reported with its place in the model.
Blueprint& Blueprint::conv(int out_channels, int kernel, int stride, int padding, bool bias,
                           std::string name) {
  return conv(ConvAttrs::square(out_channels, kernel, stride, padding, bias), std::move(name));
}

Blueprint& Blueprint::conv(const ConvAttrs& attrs, std::string name) {
  return append(LayerKind::Conv, attrs, std::move(name));
}

Blueprint& Blueprint::bn(std::string name, double eps, double momentum) {
  return append(LayerKind::BatchNorm, BatchNormAttrs{eps, momentum}, std::move(name));
}

Blueprint& Blueprint::relu(std::string name) { return append(LayerKind::ReLU, {}, std::move(name)); }

Blueprint& Blueprint::activation(Activation a, float alpha, std::string name) {
  return append(LayerKind::Activation, ActivationAttrs{a, alpha}, std::move(name));
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
Blueprint& Blueprint::hardsigmoid(std::string name) {
  return activation(Activation::Hardsigmoid, 0.f, std::move(name));
}
Blueprint& Blueprint::tanh(std::string name) { return activation(Activation::Tanh, 0.f, std::move(name)); }

Blueprint& Blueprint::cbr(int out_channels, int kernel, int stride, int padding, std::string name) {
  return cbr(ConvBnAttrs{ConvAttrs::square(out_channels, kernel, stride, padding), BatchNormAttrs{}}, std::move(name));
}

Blueprint& Blueprint::cbr(const ConvBnAttrs& attrs, std::string name) {
  return append(LayerKind::CBR, attrs, std::move(name));
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
  return append(LayerKind::MaxPool, attrs, std::move(name));
}

Blueprint& Blueprint::avgpool(const PoolAttrs& attrs, std::string name) {
  return append(LayerKind::AvgPool, attrs, std::move(name));
}

Blueprint& Blueprint::global_avgpool(std::string name) {
  return append(LayerKind::GlobalAvgPool, {}, std::move(name));
}

Blueprint& Blueprint::adaptive_avgpool(int out_h, int out_w, std::string name) {
  return append(LayerKind::AdaptiveAvgPool, AdaptiveAvgPoolAttrs{out_h, out_w}, std::move(name));
}

Blueprint& Blueprint::flatten(std::string name) { return append(LayerKind::Flatten, {}, std::move(name)); }

Blueprint& Blueprint::fc(int out_features, bool bias, std::string name, float init_std) {
  if (!(init_std >= 0.f) || !std::isfinite(init_std))
    fail("fc layer '{}': init_std {} must be finite and >= 0 (0: PyTorch's default init)", name, init_std);
  LinearAttrs attrs{.out_features = out_features, .bias = bias};
  if (init_std > 0.f) attrs.init = WeightInit::normal(init_std), attrs.bias_init = BiasInit::Zeros;
  return fc(attrs, std::move(name));
}

Blueprint& Blueprint::fc(const LinearAttrs& attrs, std::string name) {
  return append(LayerKind::Linear, attrs, std::move(name));
}

Blueprint& Blueprint::dropout(double p, std::string name) {
  return append(LayerKind::Dropout, DropoutAttrs{p}, std::move(name));
}

Blueprint& Blueprint::stochastic_depth(double p, std::string name) {
  return append(LayerKind::StochasticDepth, StochasticDepthAttrs{p}, std::move(name));
}

Blueprint& Blueprint::layer_norm(double eps, std::string name) {
  return append(LayerKind::LayerNorm, LayerNormAttrs{eps}, std::move(name));
}

Blueprint& Blueprint::group_norm(int groups, double eps, std::string name) {
  return append(LayerKind::GroupNorm, GroupNormAttrs{groups, eps}, std::move(name));
}

Blueprint& Blueprint::layer_scale(float init_value, std::string name) {
  return append(LayerKind::LayerScale, LayerScaleAttrs{init_value}, std::move(name));
}

Blueprint& Blueprint::channel_shuffle(int groups, std::string name) {
  return append(LayerKind::ChannelShuffle, ChannelShuffleAttrs{groups}, std::move(name));
}

Blueprint& Blueprint::channel_slice(int start, int count, std::string name) {
  return append(LayerKind::ChannelSlice, ChannelSliceAttrs{start, count}, std::move(name));
}

Blueprint& Blueprint::seq(const Blueprint& inner, std::string name) {
  return append(LayerKind::Sequence, {}, name.empty() ? inner.name() : std::move(name), {inner});
}

Blueprint& Blueprint::residual(const Blueprint& body, std::optional<Blueprint> shortcut,
                               bool relu_after, std::string name) {
  std::vector<Blueprint> children{body};
  if (shortcut) children.push_back(*shortcut);
  return append(LayerKind::Residual, ResidualAttrs{relu_after}, std::move(name), std::move(children));
}

Blueprint& Blueprint::input(int height, int width, int channels) {
  input_hwc_ = Shape{height, width, channels};
  return *this;
}

}  // namespace kiln
