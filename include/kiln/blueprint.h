#pragma once
// The model DSL. A Blueprint is an ordered list of nodes; residual nodes hold a body and an
// optional projection shortcut as nested Blueprints. Names follow the nesting
// ("layer1.0.body.conv1") and become the tensor names of parameters and checkpoints.
// Each node reads the node before it (the chained form, for straight paths) unless it is told
// otherwise through handles (Blueprint::Ref): from() points the next node at any earlier output,
// and joins (add, concat) read several handles, so a blueprint is a graph as PyTorch's forward() writes one.
#include <cstdint>
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
  // The outputs it reads, as indices of nodes of its own blueprint (-1: that blueprint's input);
  // empty: the node before it (the blueprint's input for the first). A join (add, concat) reads several.
  std::vector<int> inputs;
};

class Blueprint {
 public:
  // A handle to one node's output, PyTorch's tensor in forward(): the node's index in the
  // blueprint that made it (-1: that blueprint's input). Handles index their own blueprint's
  // nodes, so one made by another blueprint is refused where it is passed, and the compiler
  // refuses a node reading one that is not written before it. A seq() or residual() node is one
  // node: its handle is its output; inside their nested blueprints, handles index those.
  class Ref {
   public:
    int node() const { return node_; }
    bool is_source() const { return node_ < 0; }

   private:
    friend class Blueprint;
    Ref(std::uint64_t blueprint, int node) : blueprint_(blueprint), node_(node) {}
    std::uint64_t blueprint_;  // Blueprint::id_ of the blueprint that made it
    int node_;
  };

  explicit Blueprint(std::string name = "model");

  // The last node's output (the blueprint's input while it has none): `auto x = m.last();`.
  Ref last() const;
  // The blueprint's input (for a nested blueprint, what its seq() or residual() node reads).
  Ref source() const;
  // The next node reads `r` instead of the previous node's output; later chained calls read the
  // node before them again.
  Blueprint& from(Ref r);
  // a + b (an Add layer, same shapes), PyTorch's `a + b`; it becomes the last node.
  Blueprint& add(Ref a, Ref b, std::string name = {});
  // a * b (a Mul layer), PyTorch's `a * b`: of one shape, or one of them a per-channel gate of
  // shape N x 1 x 1 x C (adaptive_avgpool(1, 1)'s, PyTorch's (N, C, 1, 1)) broadcast over the
  // other's height and width, as squeeze-and-excitation scales its input; it becomes the last node.
  Blueprint& mul(Ref a, Ref b, std::string name = {});
  // The inputs side by side along the channel axis (a Concat layer: two or more handles of equal
  // batch, height and width), PyTorch's `torch.cat(xs, dim=1)`; it becomes the last node.
  Blueprint& concat(std::vector<Ref> inputs, std::string name = {});

  Blueprint& conv(int out_channels, int kernel, int stride = 1, int padding = 0, bool bias = false,
                  std::string name = {});
  // Every attribute of the convolution (kernel height and width, four paddings, ...): the compiler
  // refuses what the kernels do not run yet, naming the layer and the attribute.
  Blueprint& conv(const ConvAttrs& attrs, std::string name = {});
  Blueprint& bn(std::string name = {}, double eps = 1e-5, double momentum = 0.1);
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
  Blueprint& hardsigmoid(std::string name = {});
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
  // PyTorch's AdaptiveAvgPool2d((out_h, out_w)), a feature map of that size: (1, 1) gives the
  // N x 1 x 1 x C map a squeeze-and-excitation block's 1x1 convolutions read (global_avgpool gives
  // the N x C rows a classifier reads).
  Blueprint& adaptive_avgpool(int out_h, int out_w, std::string name = {});
  Blueprint& flatten(std::string name = {});
  // A flat input (N, F) gives (N, out_features); a feature map (N, H, W, C) gives (N, H, W,
  // out_features), the layer applied at every position (nn.Linear on a channels-last map: ConvNeXt).
  // init_std > 0: weight ~ N(0, init_std²), bias 0 (torchvision's VGG, MobileNet, RegNet heads); 0:
  // nn.Linear's default. LinearAttrs::init and bias_init take any other.
  Blueprint& fc(int out_features, bool bias = true, std::string name = {}, float init_std = 0.f);
  Blueprint& fc(const LinearAttrs& attrs, std::string name = {});
  Blueprint& dropout(double p, std::string name = {});
  // torchvision's StochasticDepth(p, "row"): each sample's input dropped with probability p in
  // training (the rest scaled by 1 / (1 - p)), the identity in inference.
  Blueprint& stochastic_depth(double p, std::string name = {});
  // nn.LayerNorm(C, eps) over each position's channels (torchvision's LayerNorm2d; ConvNeXt's
  // nn.LayerNorm between its permutes), with a learned weight and bias.
  Blueprint& layer_norm(double eps = 1e-5, std::string name = {});
  // nn.GroupNorm(groups, C, eps), with a learned weight and bias.
  Blueprint& group_norm(int groups, double eps = 1e-5, std::string name = {});
  // y = gamma * x with a learned per-channel gamma started at init_value (ConvNeXt's layer_scale):
  // its parameter is `<name>.layer_scale`.
  Blueprint& layer_scale(float init_value = 1e-6f, std::string name = {});
  // torchvision's channel_shuffle(x, groups) (ShuffleNetV2).
  Blueprint& channel_shuffle(int groups, std::string name = {});
  // Channels [start, start + count) of its input, x.narrow(1, start, count): with from(), the two
  // halves of x.chunk(2, dim=1) are channel_slice(0, C / 2) and channel_slice(C / 2, C / 2).
  Blueprint& channel_slice(int start, int count, std::string name = {});
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
  // The node a from() with no node after it points at (the compiler refuses it), else none.
  const std::optional<int>& pending_from() const { return next_input_; }

 private:
  Blueprint& append(LayerKind kind, LayerAttrs attrs, std::string name, std::vector<Blueprint> children = {});
  // Refuses a handle another blueprint made, naming the call that got it.
  void check_own(const Ref& r, const char* call) const;
  std::string name_;
  // Tells this blueprint's handles from others'; a copy keeps it, as its nodes are the same.
  std::uint64_t id_;
  std::vector<BlueprintNode> nodes_;
  std::optional<Shape> input_hwc_;
  std::optional<int> next_input_;  // from(): what the next node reads
};

}  // namespace kiln
