// Graph passes between expansion and lowering.
#include "kiln/compile.h"
#include "kiln/error.h"

#include <algorithm>

namespace kiln {

// Conv (no bias) -> BatchNorm -> ReLU, each the only consumer of the one before, becomes one
// CBR layer. A conv bias in front of BN is cancelled by the mean subtraction, but fusing would
// silently drop a parameter the user asked for, so biased convs stay unfused.
void fuse_conv_bn_relu(LayerGraph& graph) {
  auto consumers = graph.consumers();
  std::vector<bool> removed(graph.layers.size(), false);
  for (size_t c = 0; c < graph.layers.size(); ++c) {
    const Layer& conv = graph.layers[c];
    if (conv.kind != LayerKind::Conv || conv.attrs.bias || consumers[c].size() != 1) continue;
    const int b = consumers[c][0];
    const Layer& bn = graph.layers[b];
    if (bn.kind != LayerKind::BatchNorm || consumers[b].size() != 1) continue;
    const int r = consumers[b][0];
    Layer& relu = graph.layers[r];
    if (relu.kind != LayerKind::ReLU) continue;

    Layer cbr;
    cbr.kind = LayerKind::CBR;
    cbr.name = conv.name;
    cbr.conv_name = conv.name, cbr.bn_name = bn.name;
    cbr.attrs = conv.attrs;
    cbr.attrs.eps = bn.attrs.eps, cbr.attrs.momentum = bn.attrs.momentum;
    cbr.inputs = conv.inputs;
    cbr.out_shape = relu.out_shape;
    relu = std::move(cbr);  // stored at the ReLU's index, so its consumers need no renumbering
    removed[c] = removed[b] = true;
  }
  // Compact the layer list and renumber inputs.
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

// Layers reading the data batch need no input gradient (convolutions skip dgrad): the one place
// that decides it; lowering asks LowerContext::input_is_data, which reads this mark.
void mark_first_layer(LayerGraph& graph) {
  for (Layer& layer : graph.layers)
    layer.attrs.first_layer = layer.kind != LayerKind::Input &&
                              std::find(layer.inputs.begin(), layer.inputs.end(), 0) != layer.inputs.end();
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
    const int k = layer.attrs.out_channels;
    if (layer.kind == LayerKind::CBR && k % 8 != 0)
      fail("cbr '{}': {} output channels; CBR on GPU in {} needs a multiple of 8 — use {} or pad the channels to {}",
           layer.name, k, precision_name(options.precision), std::max(8, k / 8 * 8), (k + 7) / 8 * 8);
  }
}

}  // namespace kiln
