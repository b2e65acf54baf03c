// Graph passes between expansion and lowering.
#include "compile/layer_def.h"
#include "ir/fused_layer_kinds.h"
#include "kiln/compile.h"
#include "kiln/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

namespace {

// Layers marked for removal are dropped and the remaining inputs renumbered.
void compact(LayerGraph& graph, const std::vector<bool>& removed) {
  std::vector<int> new_index(graph.layers.size(), -1);
  std::vector<Layer> kept;
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    if (removed[i]) continue;
    new_index[i] = int(kept.size());
    kept.push_back(std::move(graph.layers[i]));
  }
  for (Layer& layer : kept)
    for (int& in : layer.inputs) in = new_index.at(in);
  graph.layers = std::move(kept);
}

// A bias-free Conv layer the fused ops run on the target (fused_ops_run): one a following
// BatchNorm may fuse with (fusing a biased one would silently drop a parameter the user asked for;
// a grouped, dilated or otherwise shaped one stays a Conv layer, which runs any window).
bool is_fusable_unbiased_conv(const Layer& layer, const CompileOptions& options) {
  if (layer.kind != LayerKind::Conv) return false;
  const ConvAttrs& a = attrs_of<ConvAttrs>(layer);
  return !a.bias && fused_ops_run(a, options);
}

// The fused layer of kind `kind` standing for `conv` followed by `bn`: both layers' attributes
// (ConvBnAttrs) and the conv's inputs, both names kept (its tensors take them).
Layer fused_conv_bn(LayerKind kind, const Layer& conv, const Layer& bn, const Shape& out_shape) {
  Layer fused;
  fused.kind = kind;
  fused.name = conv.name;
  fused.conv_name = conv.name, fused.bn_name = bn.name;
  fused.attrs = ConvBnAttrs{attrs_of<ConvAttrs>(conv), attrs_of<BatchNormAttrs>(bn)};
  fused.inputs = conv.inputs;
  fused.out_shape = out_shape;
  return fused;
}

}  // namespace

// Conv (no bias) -> BatchNorm -> ReLU, each the only consumer of the one before, becomes one
// CBR layer. A conv bias in front of BN is cancelled by the mean subtraction, but fusing would
// silently drop a parameter the user asked for, so biased convs stay unfused.
void fuse_conv_bn_relu(LayerGraph& graph, const CompileOptions& options) {
  auto consumers = graph.consumers();
  std::vector<bool> removed(graph.layers.size(), false);
  for (size_t c = 0; c < graph.layers.size(); ++c) {
    const Layer& conv = graph.layers[c];
    if (!is_fusable_unbiased_conv(conv, options) || consumers[c].size() != 1) continue;
    const int b = consumers[c][0];
    const Layer& bn = graph.layers[b];
    if (bn.kind != LayerKind::BatchNorm || consumers[b].size() != 1) continue;
    const int r = consumers[b][0];
    Layer& relu = graph.layers[r];
    if (relu.kind != LayerKind::ReLU) continue;

    // Stored at the ReLU's index, so its consumers need no renumbering.
    relu = fused_conv_bn(LayerKind::CBR, conv, bn, relu.out_shape);
    removed[c] = removed[b] = true;
  }
  compact(graph, removed);
}

// Conv -> BatchNorm -> ReLU or activation, left by fuse_conv_bn_relu (a window the CBR does not run,
// or another activation), becomes one conv_bn_act layer, stored at the activation's index and
// named as the activation, whose output it is: a cbr() node the CBR cannot run (expanded into
// "X.conv", "X.bn" and the ReLU "X") is then the layer "X", as its CBR would be. Biased
// convolutions stay unfused, for the reason given there.
void fuse_conv_bn_activation(LayerGraph& graph) {
  auto consumers = graph.consumers();
  std::vector<bool> removed(graph.layers.size(), false);
  for (size_t c = 0; c < graph.layers.size(); ++c) {
    const Layer& conv = graph.layers[c];
    if (conv.kind != LayerKind::Conv || attrs_of<ConvAttrs>(conv).bias || consumers[c].size() != 1) continue;
    const int b = consumers[c][0];
    const Layer& bn = graph.layers[b];
    if (bn.kind != LayerKind::BatchNorm || consumers[b].size() != 1) continue;
    const int r = consumers[b][0];
    Layer& act = graph.layers[r];
    if (act.kind != LayerKind::ReLU && act.kind != LayerKind::Activation) continue;
    ConvBnActAttrs attrs;
    attrs.conv = attrs_of<ConvAttrs>(conv), attrs.bn = attrs_of<BatchNormAttrs>(bn);
    if (act.kind == LayerKind::Activation) attrs.relu = false, attrs.act = attrs_of<ActivationAttrs>(act);
    Layer fused = fused_conv_bn(fused_layer::ConvBnAct, conv, bn, act.out_shape);
    fused.name = act.name;
    fused.attrs = std::move(attrs);
    act = std::move(fused);
    removed[c] = removed[b] = true;
  }
  compact(graph, removed);
}

// Add(BN(Conv(x)), shortcut) -> ReLU, each the only consumer of the one before, becomes a
// conv_bn layer (stored at the BN's index) and a bn_add_relu layer (at the ReLU's). A shortcut
// that is itself BN(Conv(.)) with one consumer becomes a conv_bn too, normalized in the same
// pass. The body may be either input of the add; the fused layer takes it first.
void fuse_residual_tails(LayerGraph& graph, const CompileOptions& options) {
  const auto consumers = graph.consumers();
  std::vector<bool> removed(graph.layers.size(), false);
  // The conv index of BN(Conv(.)) at `bn` when both can fuse, else -1.
  auto conv_bn_at = [&](int bn) {
    const Layer& norm = graph.layers[bn];
    if (norm.kind != LayerKind::BatchNorm || consumers[bn].size() != 1 || norm.out_shape.size() != 4) return -1;
    const int c = norm.inputs[0];
    const Layer& conv = graph.layers[c];
    if (!is_fusable_unbiased_conv(conv, options) || consumers[c].size() != 1) return -1;
    return c;
  };
  auto make_conv_bn = [&](int conv_index, int bn_index) {
    Layer& bn = graph.layers[bn_index];
    bn = fused_conv_bn(fused_layer::ConvBN, graph.layers[conv_index], bn, bn.out_shape);
    removed[conv_index] = true;
  };
  for (size_t r = 0; r < graph.layers.size(); ++r) {
    if (graph.layers[r].kind != LayerKind::ReLU) continue;
    const int add = graph.layers[r].inputs[0];
    const Layer& sum = graph.layers[add];
    if (sum.kind != LayerKind::Add || consumers[add].size() != 1 || sum.inputs[0] == sum.inputs[1]) continue;
    int body = sum.inputs[0], shortcut = sum.inputs[1];
    if (conv_bn_at(body) < 0) std::swap(body, shortcut);
    const int body_conv = conv_bn_at(body);
    if (body_conv < 0) continue;
    const int shortcut_conv = conv_bn_at(shortcut);
    make_conv_bn(body_conv, body);
    if (shortcut_conv >= 0) make_conv_bn(shortcut_conv, shortcut);
    Layer& relu = graph.layers[r];
    Layer tail;
    tail.kind = fused_layer::BnAddRelu;
    tail.name = relu.name;
    tail.inputs = {body, shortcut};
    tail.out_shape = relu.out_shape;
    relu = std::move(tail);
    removed[add] = true;
  }
  compact(graph, removed);
}

// Layers reading the data batch need no input gradient (convolutions skip dgrad): the one place
// that decides it; lowering asks LowerContext::input_is_data, which reads this mark.
void mark_first_layer(LayerGraph& graph) {
  for (Layer& layer : graph.layers)
    layer.marks.first_layer = layer.kind != LayerKind::Input &&
                              std::find(layer.inputs.begin(), layer.inputs.end(), 0) != layer.inputs.end();
}

// Freezing ends after the last layer that is `through` or lies in its block. A fused conv_bn
// leaves its BatchNorm to the block end reading it (bn_add_relu normalizes with batch statistics
// in training), so a frozen conv_bn read by a layer that trains would mix eval and training
// BatchNorm in one block: freezing must take whole residual blocks.
void mark_frozen(LayerGraph& graph, const std::string& through) {
  auto in_block = [&](const std::string& name) {
    return name == through || (name.size() > through.size() && name.compare(0, through.size(), through) == 0 &&
                               name[through.size()] == '.');
  };
  int last = -1;
  for (size_t i = 1; i < graph.layers.size(); ++i)
    if (in_block(graph.layers[i].name)) last = int(i);
  if (last < 0) {
    std::vector<std::string> blocks;
    for (size_t i = 1; i < graph.layers.size(); ++i) {
      const std::string& name = graph.layers[i].name;
      const std::string top = name.substr(0, name.find('.'));
      if (blocks.empty() || blocks.back() != top) blocks.push_back(top);
    }
    fail("--freeze '{}': the model has no layer or block of that name; its blocks are {} (`kiln plan` lists every "
         "layer)", through, fmt::join(blocks, ", "));
  }
  if (last == int(graph.layers.size()) - 1)
    fail("--freeze '{}' would freeze every layer up to the last ('{}'), leaving nothing to train; name an earlier "
         "layer", through, graph.layers[last].name);
  for (int i = 1; i <= last; ++i) graph.layers[i].marks.frozen = true;
  for (size_t i = last + 1; i < graph.layers.size(); ++i) {
    Layer& layer = graph.layers[i];
    for (int in : layer.inputs) {
      const Layer& producer = graph.layers[in];
      if (!producer.marks.frozen) continue;
      if (producer.kind == fused_layer::ConvBN)
        fail("--freeze '{}' ends inside a residual block: '{}' is frozen but '{}', which finishes its BatchNorm, is "
             "not. Freeze whole blocks: name the block (e.g. '{}') or an earlier layer", through, producer.name,
             layer.name, producer.name.substr(0, producer.name.rfind('.')));
      layer.marks.first_layer = true;  // no gradient flows into a frozen layer
    }
  }
}

void check_target_limits(const LayerGraph& graph, const CompileOptions& options) {
  if (options.device == Device::CPU &&
      (options.precision == Precision::FP16 || options.precision == Precision::BF16))
    fail("precision {} is GPU-only; the CPU backend trains in fp32 (use --precision fp32 or --device cuda)",
         precision_name(options.precision));
  if (options.device == Device::CUDA && options.precision == Precision::FP64)
    fail("precision fp64 is CPU-only (it exists for gradient checks); use fp32, fp16 or bf16 on cuda");
  const bool mixed = options.precision == Precision::FP16 || options.precision == Precision::BF16;
  if (options.device != Device::CUDA || !mixed) return;
  for (const Layer& layer : graph.layers) {
    if (layer.kind != LayerKind::CBR && layer.kind != fused_layer::ConvBN) continue;
    const int k = attrs_of<ConvAttrs>(layer).out_channels;
    // compile() leaves such convolutions unfused (fused_ops_run): only a graph fused by hand gets here.
    if (k % 8 != 0)
      fail("{} '{}': {} output channels; the fused op on GPU in {} needs a multiple of 8. Leave it as conv, bn and "
           "activation layers (fuse_conv_bn_relu with these CompileOptions does), or give it {} or {} channels",
           layer_kind_name(layer.kind), layer.name, k, precision_name(options.precision), std::max(8, k / 8 * 8),
           (k + 7) / 8 * 8);
  }
}

}  // namespace kiln
