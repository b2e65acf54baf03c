#include "import/onnx_import_checks.h"

#include <fmt/format.h>

#include <map>

#include "kiln/compile.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

// ONNX's window count along an axis in ceil mode before opset 19: no window is dropped.
int64_t onnx_ceil_windows(int64_t in, int kernel, int stride, int pad_begin, int pad_end) {
  const int64_t span = in + pad_begin + pad_end - kernel;
  return (span + stride - 1) / stride + 1;
}

// A layer that reads each feature alone and keeps the features' order (flatten_read_by's).
bool per_feature(LayerKind kind) {
  return kind == LayerKind::Dropout || kind == LayerKind::ReLU || kind == LayerKind::Activation ||
         kind == LayerKind::StochasticDepth;
}

}  // namespace

LayerGraph check_blueprint_shapes(const Blueprint& blueprint, const PendingChecks& checks, const OnnxModel& model) {
  CompileOptions options;
  options.batch = 1;
  LayerGraph graph;
  try {
    graph = expand(blueprint, options);
  } catch (const Error& e) {
    fail("'{}': the imported model does not fit together at its input size: {}", model.path, e.what());
  }
  std::map<std::string, int> index;
  for (size_t i = 0; i < graph.layers.size(); ++i) index[graph.layers[i].name] = int(i);
  const auto layer = [&](const std::string& name) -> const Layer& { return graph.layers.at(size_t(index.at(name))); };
  const auto consumers = graph.consumers();

  for (const PendingChecks::Features& f : checks.features) {
    const Layer& l = layer(f.layer);
    const Shape& shape = f.input_side ? graph.layers.at(size_t(l.inputs.at(0))).out_shape : l.out_shape;
    if (shape.size() != 2 || shape[1] != f.width)
      fail("'{}': {} {} {} features, but {} {} here (at the model's {}x{} input): the weights were made for another "
           "input size, or the graph is not the one they belong to", model.path, f.node,
           f.input_side ? "has a weight for" : "makes", f.width, f.input_side ? "its input has" : "the flattened map has",
           shape.size() == 2 ? shape[1] : 0, graph.layers[0].out_shape[1], graph.layers[0].out_shape[2]);
  }

  for (const PendingChecks::Flatten& f : checks.flattens) {
    const int at = index.at(f.layer);
    const Shape& map = graph.layers.at(size_t(graph.layers[size_t(at)].inputs.at(0))).out_shape;
    if (map.size() != 4 || map[1] * map[2] == 1) continue;
    std::vector<int> reached = consumers[size_t(at)];
    while (!reached.empty()) {
      const Layer& r = graph.layers[size_t(reached.back())];
      const int id = reached.back();
      reached.pop_back();
      if (r.kind == LayerKind::Linear) continue;
      if (per_feature(r.kind)) {
        reached.insert(reached.end(), consumers[size_t(id)].begin(), consumers[size_t(id)].end());
        continue;
      }
      fail("'{}': {} flattens a {}x{} map of {} channels in ONNX's C,H,W order, and {} reads it; kiln flattens its "
           "channels-last maps in H,W,C order and reorders the columns of the linear layers reading a flatten to match, "
           "but no other layer: only linear layers (through dropout and activations) may read such a flatten",
           model.path, f.node, map[1], map[2], map[3], layer_label(r));
    }
  }

  for (const PendingChecks::CeilPool& p : checks.ceil_pools) {
    const Layer& l = layer(p.layer);
    const Shape& in = graph.layers.at(size_t(l.inputs.at(0))).out_shape;
    const int64_t onnx_h = onnx_ceil_windows(in[1], p.kernel_h, p.stride_h, p.pad_top, p.pad_bottom);
    const int64_t onnx_w = onnx_ceil_windows(in[2], p.kernel_w, p.stride_w, p.pad_left, p.pad_right);
    if (onnx_h != l.out_shape[1] || onnx_w != l.out_shape[2])
      fail("'{}': {} pools its {}x{} input in ceil mode, where ONNX before opset 19 (this file's is {}) keeps a last "
           "window that starts in the padding, giving {}x{}, and PyTorch's rule (kiln's) drops it, giving {}x{}: the "
           "file does not say which it means. Export at opset 19 or later, or use an input size without such a window",
           model.path, p.node, in[1], in[2], model.opset, onnx_h, onnx_w, l.out_shape[1], l.out_shape[2]);
  }
  return graph;
}

}  // namespace kiln::onnx_import
