#include "kiln/program.h"

#include "ir/fused_layer_kinds.h"
#include "kiln/error.h"

namespace kiln {

size_t TensorSpec::bytes() const { return size_t(numel(shape)) * dtype_size(dtype); }

int Program::find(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return int(i);
  return -1;
}

std::vector<std::vector<int>> LayerGraph::consumers() const {
  std::vector<std::vector<int>> out(layers.size());
  for (size_t c = 0; c < layers.size(); ++c)
    for (int i : layers[c].inputs) out[i].push_back(int(c));
  return out;
}

int LayerGraph::count(LayerKind kind) const {
  int n = 0;
  for (const Layer& l : layers) n += l.kind == kind;
  return n;
}

LossScaleMode parse_loss_scale_mode(const std::string& text) {
  if (text == "auto") return LossScaleMode::Auto;
  if (text == "dynamic") return LossScaleMode::Dynamic;
  if (text == "off") return LossScaleMode::Off;
  fail("unknown loss scaling '{}': use 'auto' (dynamic for fp16, off otherwise), 'dynamic' or 'off'", text);
}

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::Input: return "input";
    case LayerKind::Conv: return "conv";
    case LayerKind::BatchNorm: return "bn";
    case LayerKind::ReLU: return "relu";
    case LayerKind::CBR: return "cbr";
    case LayerKind::MaxPool: return "maxpool";
    case LayerKind::AvgPool: return "avgpool";
    case LayerKind::GlobalAvgPool: return "global_avgpool";
    case LayerKind::Flatten: return "flatten";
    case LayerKind::Linear: return "fc";
    case LayerKind::Dropout: return "dropout";
    case LayerKind::Add: return "add";
    case LayerKind::Activation: return "activation";
    case LayerKind::Concat: return "concat";
    case LayerKind::Mul: return "mul";
    case LayerKind::AdaptiveAvgPool: return "adaptive_avgpool";
    case LayerKind::StochasticDepth: return "stochastic_depth";
    case LayerKind::LayerNorm: return "layer_norm";
    case LayerKind::GroupNorm: return "group_norm";
    case LayerKind::LayerScale: return "layer_scale";
    case LayerKind::ChannelShuffle: return "channel_shuffle";
    case LayerKind::ChannelSlice: return "channel_slice";
    case LayerKind::Sequence: return "seq";
    case LayerKind::Residual: return "residual";
    case LayerKind::FirstFused: break;  // a fused kind's value, named by its family's list below
  }
  const char* fused = fused_layer_kind_name(kind);
  return fused ? fused : "?";
}

const char* op_kind_name(OpKind kind) {
  switch (kind) {
#define KILN_OP_KIND_NAME(name) \
  case OpKind::name: return #name;
    KILN_OP_KINDS(KILN_OP_KIND_NAME)
#undef KILN_OP_KIND_NAME
  }
  return "?";
}

}  // namespace kiln
