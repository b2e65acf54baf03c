#pragma once
// The model DSL. A Blueprint is an ordered list of nodes; residual nodes hold a body and an
// optional projection shortcut as nested Blueprints. Names follow the nesting
// ("layer1.0.body.conv1") and become the tensor names of parameters and checkpoints.
#include <optional>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/layer_attrs.h"
#include "kiln/layer_kind_attrs.h"
#include "kiln/layer_vocabulary.h"

namespace kiln {

class Blueprint;

struct BlueprintNode {
  LayerKind kind;
  std::string name;  // may be empty: the compiler numbers it by position
  LayerAttrs attrs;  // its kind's struct (kiln/layer_kind_attrs.h), none for a kind without
  std::vector<Blueprint> children;  // Sequence: [seq]; Residual: [body] or [body, shortcut]
};

class Blueprint {
 public:
  explicit Blueprint(std::string name = "model");

  Blueprint& conv(int out_channels, int kernel, int stride = 1, int padding = 0, bool bias = false,
                  std::string name = {});
  // Every attribute of the convolution (kernel height and width, four paddings, ...): the compiler
  // refuses what the kernels do not run yet, naming the layer and the attribute.
  Blueprint& conv(const ConvAttrs& attrs, std::string name = {});
  Blueprint& bn(std::string name = {}, float eps = 1e-5f, float momentum = 0.1f);
  Blueprint& relu(std::string name = {});
  // Elementwise activations (PyTorch's functionals of the same names).
  Blueprint& activation(Activation a, float alpha = 0.f, std::string name = {});
  Blueprint& relu6(std::string name = {});
  Blueprint& leaky_relu(float negative_slope = 0.01f, std::string name = {});
  Blueprint& elu(float alpha = 1.f, std::string name = {});
  Blueprint& silu(std::string name = {});
  Blueprint& hardswish(std::string name = {});
  Blueprint& gelu(bool tanh_approximation = false, std::string name = {});
  Blueprint& sigmoid(std::string name = {});
  Blueprint& tanh(std::string name = {});
  Blueprint& cbr(int out_channels, int kernel, int stride = 1, int padding = 0, std::string name = {});
  Blueprint& cbr(const ConvBnAttrs& attrs, std::string name = {});
  Blueprint& conv_bn_relu(int out_channels, int kernel, int stride = 1, int padding = 0,
                          std::string name = {});
  Blueprint& maxpool(int kernel, int stride, int padding = 0, std::string name = {});
  Blueprint& avgpool(int kernel, int stride, int padding = 0, std::string name = {});
  Blueprint& maxpool(const PoolAttrs& attrs, std::string name = {});
  Blueprint& avgpool(const PoolAttrs& attrs, std::string name = {});
  Blueprint& global_avgpool(std::string name = {});
  Blueprint& flatten(std::string name = {});
  // init_std > 0: weight ~ N(0, init_std²), bias 0 (LinearAttrs::init_std); 0: nn.Linear's default.
  Blueprint& fc(int out_features, bool bias = true, std::string name = {}, float init_std = 0.f);
  Blueprint& fc(const LinearAttrs& attrs, std::string name = {});
  Blueprint& dropout(float p, std::string name = {});
  // Appends another blueprint's nodes as a named sub-sequence.
  Blueprint& seq(const Blueprint& inner, std::string name = {});
  // y = relu?(body(x) + shortcut(x)); no shortcut means identity.
  Blueprint& residual(const Blueprint& body, std::optional<Blueprint> shortcut = std::nullopt,
                      bool relu_after = true, std::string name = {});

  // Input geometry the model was designed for (H, W, C); the compiler's target may override it.
  Blueprint& input(int height, int width, int channels);

  const std::string& name() const { return name_; }
  const std::vector<BlueprintNode>& nodes() const { return nodes_; }
  const std::optional<Shape>& input_hwc() const { return input_hwc_; }

 private:
  Blueprint& add(LayerKind kind, LayerAttrs attrs, std::string name,
                 std::vector<Blueprint> children = {});
  std::string name_;
  std::vector<BlueprintNode> nodes_;
  std::optional<Shape> input_hwc_;
};

}  // namespace kiln
