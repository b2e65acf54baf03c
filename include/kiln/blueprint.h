#pragma once
// The model DSL. A Blueprint is an ordered list of nodes; residual nodes hold a body and an
// optional projection shortcut as nested Blueprints. Names follow the nesting
// ("layer1.0.body.conv1") and become the tensor names of parameters and checkpoints.
#include <optional>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln {

enum class LayerKind : uint8_t {
  Input,
  Conv,
  BatchNorm,
  ReLU,
  CBR,  // fused Conv -> BatchNorm -> ReLU
  // A ResNet block end, fused by the compiler (src/ops/resblock/): ConvBN is Conv -> BatchNorm
  // whose output is the convolution's and whose normalization its one consumer, a BnAddRelu,
  // applies; BnAddRelu is relu(BN(conv) + shortcut), the shortcut a ConvBN too or any layer.
  ConvBN,
  BnAddRelu,
  MaxPool,
  AvgPool,
  GlobalAvgPool,
  Flatten,
  Linear,
  Dropout,
  Add,  // residual add of two inputs
  Activation,  // an elementwise activation other than ReLU (LayerAttrs::activation says which)
  SoftmaxCrossEntropy,
  // Blueprint-only composites, expanded away by the compiler:
  Sequence,
  Residual,
};

const char* layer_kind_name(LayerKind kind);

// The elementwise activations besides ReLU (whose byte mask and CBR fusion make it a layer of
// its own), as PyTorch's functionals of the same names define them. Their math is in
// src/ops/activation/activation_functions.h.
enum class Activation : uint8_t {
  ReLU6,      // min(max(x, 0), 6)
  LeakyReLU,  // x > 0 ? x : alpha * x (alpha: negative slope, PyTorch's default 0.01)
  ELU,        // x > 0 ? x : alpha * (exp(x) - 1) (alpha default 1)
  SiLU,       // x * sigmoid(x)
  Hardswish,  // x * relu6(x + 3) / 6
  GELU,       // x * Phi(x), the exact (erf) form
  GELUTanh,   // GELU's tanh approximation (approximate='tanh')
  Sigmoid,
  Tanh,
};

const char* activation_name(Activation a);

struct LayerAttrs {
  int out_channels = 0;  // Conv, CBR: output channels; Linear: output features
  int kernel = 0;        // Conv, CBR, pools: square kernel size
  int stride = 1;
  int padding = 0;
  bool bias = false;         // Conv, Linear
  float eps = 1e-5f;         // BatchNorm, CBR
  float momentum = 0.1f;     // BatchNorm, CBR: weight of the new batch in running stats
  float p = 0.f;             // Dropout probability
  bool first_layer = false;  // set by the compiler: an input is the data batch, so no dX of it is computed
  bool relu_after = true;    // Residual: apply ReLU after the add
  Activation activation = Activation::SiLU;  // Activation: which function
  float alpha = 0.f;                         // Activation: LeakyReLU's slope, ELU's alpha
  // Linear: > 0 draws the weight from N(0, init_std²) and starts the bias at 0 (torchvision's VGG
  // classifier, std 0.01); 0 keeps PyTorch's nn.Linear default, U(±1/sqrt(in)) for both.
  float init_std = 0.f;
};

class Blueprint;

struct BlueprintNode {
  LayerKind kind;
  std::string name;  // may be empty: the compiler numbers it by position
  LayerAttrs attrs;
  std::vector<Blueprint> children;  // Sequence: [seq]; Residual: [body] or [body, shortcut]
};

class Blueprint {
 public:
  explicit Blueprint(std::string name = "model");

  Blueprint& conv(int out_channels, int kernel, int stride = 1, int padding = 0, bool bias = false,
                  std::string name = {});
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
  Blueprint& conv_bn_relu(int out_channels, int kernel, int stride = 1, int padding = 0,
                          std::string name = {});
  Blueprint& maxpool(int kernel, int stride, int padding = 0, std::string name = {});
  Blueprint& avgpool(int kernel, int stride, int padding = 0, std::string name = {});
  Blueprint& global_avgpool(std::string name = {});
  Blueprint& flatten(std::string name = {});
  // init_std > 0: weight ~ N(0, init_std²), bias 0 (LayerAttrs::init_std); 0: nn.Linear's default.
  Blueprint& fc(int out_features, bool bias = true, std::string name = {}, float init_std = 0.f);
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
