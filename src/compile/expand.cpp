// Blueprint -> LayerGraph: flattens sequences and residual blocks into layers with resolved
// inputs (the node before, or the nodes a handle names: Blueprint::Ref) and full names, and
// infers every output shape (NHWC) on the way. With CBR fusion off
// (CompileOptions::fuse_cbr = false), or for a window the fused op does not run, an explicit cbr()
// becomes the Conv, BN and ReLU it stands for.
#include <algorithm>
#include <set>

#include "kiln/compile.h"
#include "compile/layer_def.h"

namespace kiln {
namespace {

// "conv 'layer1.0.conv1'", as kiln::layer_label names a layer.
std::string label(const BlueprintNode& node, const std::string& name) {
  return fmt::format("{} '{}'", layer_kind_name(node.kind), name);
}

class Expander {
 public:
  Expander(LayerGraph& graph, const CompileOptions& options) : graph_(graph), options_(options) {}

  // Appends the nodes of `bp`, whose input is layer `from`; returns the layer holding its output
  // (its last node's; `from` when it has none).
  int sequence(const Blueprint& bp, int from, const std::string& prefix) {
    // The layer holding each node's output, by node index: what handles to the node read.
    std::vector<int> out;
    out.reserve(bp.nodes().size());
    for (size_t i = 0; i < bp.nodes().size(); ++i) {
      const BlueprintNode& node = bp.nodes()[i];
      const std::string name = prefix + node_name(bp, int(i));
      out.push_back(this->node(node, inputs_of(bp, int(i), from, out, prefix), name));
    }
    if (bp.pending_from())
      fail("blueprint '{}' ends with from() (pointing at {}), which no node follows; from() says what the next "
           "node reads: write that node, or drop the from()",
           bp.name(), describe(bp, *bp.pending_from(), prefix));
    return out.empty() ? from : out.back();
  }

 private:
  static std::string node_name(const Blueprint& bp, int i) {
    const BlueprintNode& node = bp.nodes().at(size_t(i));
    return node.name.empty() ? std::to_string(i) : node.name;
  }

  // What a handle's index names, for errors: "its input", "node 3 ('block.conv2')", "node 9".
  static std::string describe(const Blueprint& bp, int k, const std::string& prefix) {
    if (k == -1) return "its input";
    if (k >= 0 && k < int(bp.nodes().size())) return fmt::format("node {} ('{}{}')", k, prefix, node_name(bp, k));
    return fmt::format("node {}", k);
  }

  // The layers node `index` of `bp` reads: the node before it, or the outputs its handles name
  // (found in `out`). Handles index their own blueprint's nodes (Blueprint::Ref), so a node can
  // only read one written before it; any other index is a handle from elsewhere.
  static std::vector<int> inputs_of(const Blueprint& bp, int index, int from, const std::vector<int>& out,
                                    const std::string& prefix) {
    const BlueprintNode& node = bp.nodes()[size_t(index)];
    if (node.inputs.empty()) return {index == 0 ? from : out.back()};
    std::vector<int> layers;
    for (int k : node.inputs) {
      if (k < -1 || k >= index)
        fail("{}: reads {} of blueprint '{}', which is not written before it; a handle reads a node of its own "
             "blueprint written before the one reading it: take it with last() after writing that node",
             label(node, prefix + node_name(bp, index)), describe(bp, k, prefix), bp.name());
      layers.push_back(k < 0 ? from : out[size_t(k)]);
    }
    return layers;
  }

  // The one place the model's attributes are checked: each node's, once, as it enters the graph,
  // named by its full name (a cbr() split by unfused_cbr is checked whole, bias included).
  // `inputs`: the layers it reads, one but for a join's.
  int node(const BlueprintNode& node, const std::vector<int>& inputs, const std::string& name) {
    node.attrs.check(label(node, name));
    const int from = inputs.at(0);
    switch (node.kind) {
      case LayerKind::Sequence: return sequence(node.children.at(0), from, name + ".");
      case LayerKind::Residual: return residual(node, from, name);
      case LayerKind::Input:
        fail("layer '{}': {} layers are added by the compiler, not written in a blueprint", name,
             layer_kind_name(node.kind));
      case LayerKind::CBR:
        // A convolution the fused ops do not run (groups, dilation, ...; on the GPU in fp16 or
        // bf16 another count of channels than 8 n) is the same three layers.
        if (!options_.fuse_cbr || !fused_ops_run(node.attrs.get<ConvAttrs>(label(node, name)), options_))
          return unfused_cbr(node, from, name);
        break;
      default: break;
    }
    Layer layer;
    layer.name = name, layer.kind = node.kind, layer.attrs = node.attrs, layer.inputs = inputs;
    if (node.kind == LayerKind::CBR) layer.conv_name = name + ".conv", layer.bn_name = name + ".bn";
    return add(std::move(layer));
  }

  // cbr() with fusion off: Conv (no bias) -> BatchNorm -> ReLU, named so that every tensor keeps
  // the fused layer's name ("<name>.conv.weight", "<name>.bn.running_var", the output "<name>"):
  // checkpoints move between fused and unfused programs, and `kiln plan --no-fuse` shows what runs.
  int unfused_cbr(const BlueprintNode& node, int from, const std::string& name) {
    const ConvBnAttrs& cbr = node.attrs.get<ConvBnAttrs>(label(node, name));
    Layer conv;
    conv.name = name + ".conv", conv.kind = LayerKind::Conv, conv.attrs = cbr.conv, conv.inputs = {from};
    const int c = add(std::move(conv));
    Layer bn;
    bn.name = name + ".bn", bn.kind = LayerKind::BatchNorm, bn.attrs = cbr.bn, bn.inputs = {c};
    const int b = add(std::move(bn));
    Layer relu;
    relu.name = name, relu.kind = LayerKind::ReLU, relu.inputs = {b};
    return add(std::move(relu));
  }

  int residual(const BlueprintNode& node, int from, const std::string& name) {
    const int body = sequence(node.children.at(0), from, name + ".");
    if (body == from) fail("residual '{}': its body is empty; give it at least one layer", name);
    const int shortcut =
        node.children.size() > 1 ? sequence(node.children[1], from, name + "." + node.children[1].name() + ".")
                                 : from;
    Layer add_layer;
    add_layer.name = name + ".add", add_layer.kind = LayerKind::Add, add_layer.inputs = {body, shortcut};
    int out = add(std::move(add_layer));
    if (node.attrs.get<ResidualAttrs>(label(node, name)).relu_after) {
      Layer relu;
      relu.name = name + ".relu", relu.kind = LayerKind::ReLU, relu.inputs = {out};
      out = add(std::move(relu));
    }
    return out;
  }

  int add(Layer layer) {
    if (!names_.insert(layer.name).second)
      fail("layer name '{}' is used twice; give the layers distinct names", layer.name);
    std::vector<Shape> inputs;
    for (int i : layer.inputs) inputs.push_back(graph_.layers.at(i).out_shape);
    layer.out_shape = layer_def(layer.kind).infer_shape(layer, inputs);
    graph_.layers.push_back(std::move(layer));
    return int(graph_.layers.size()) - 1;
  }

  LayerGraph& graph_;
  const CompileOptions& options_;
  std::set<std::string> names_{"input"};
};

// The layers of `blueprint` for inputs of `hwc`, with their shapes inferred.
LayerGraph expand_at(const Blueprint& blueprint, const CompileOptions& options, const Shape& hwc) {
  LayerGraph graph;
  Layer input;
  input.name = "input", input.kind = LayerKind::Input;
  input.out_shape = {options.batch, hwc[0], hwc[1], hwc[2]};
  graph.layers.push_back(input);
  Expander(graph, options).sequence(blueprint, 0, "");
  // A layer no one reads (a branch that from() left and nothing joined) would train on no
  // gradient; the program's output is its last layer.
  const auto consumers = graph.consumers();
  for (size_t i = 0; i + 1 < graph.layers.size(); ++i)
    if (consumers[i].empty())
      fail("model '{}': {} is read by no layer and is not the model's output (its last layer, '{}'): join it to the "
           "graph (e.g. add(handle, last())) or remove it",
           blueprint.name(), layer_label(graph.layers[i]), graph.layers.back().name);
  const Shape& out = graph.layers.back().out_shape;
  if (options.loss && out.size() != 2)
    fail("model '{}': last layer '{}' gives {}, but a classifier must end in (N, classes); end with flatten() or "
         "global_avgpool() and then fc() (an fc on a feature map maps the channels at every position)",
         blueprint.name(), graph.layers.back().name, shape_str(out));
  return graph;
}

bool expands_at(const Blueprint& blueprint, const CompileOptions& options, int64_t side, int64_t channels) {
  try {
    expand_at(blueprint, options, {side, side, channels});
    return true;
  } catch (const Error&) {
    return false;
  }
}

Shape input_geometry(const Blueprint& blueprint, const CompileOptions& options) {
  return options.input_hwc.empty() ? blueprint.input_hwc().value_or(Shape{}) : options.input_hwc;
}

constexpr int kLargestTriedSide = 4096;

}  // namespace

int min_input_side(const Blueprint& blueprint, const CompileOptions& options) {
  const Shape hwc = input_geometry(blueprint, options);
  const int64_t channels = hwc.size() == 3 && hwc[2] > 0 ? hwc[2] : 3;
  if (blueprint.nodes().empty() || !expands_at(blueprint, options, kLargestTriedSide, channels)) return 0;
  // A larger input never gives a smaller feature map, so the sides that work are those from the
  // smallest one up: a bisection finds it.
  int lo = 1, hi = kLargestTriedSide;  // hi works
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (expands_at(blueprint, options, mid, channels)) hi = mid;
    else lo = mid + 1;
  }
  return hi;
}

LayerGraph expand(const Blueprint& blueprint, const CompileOptions& options) {
  if (options.batch <= 0) fail("batch size must be positive, got {}; use e.g. --batch 64", options.batch);
  const Shape hwc = input_geometry(blueprint, options);
  if (hwc.size() != 3)
    fail("model '{}': input geometry unknown; call Blueprint::input(h, w, c) or set CompileOptions::input_hwc",
         blueprint.name());
  for (int64_t d : hwc)
    if (d <= 0) fail("model '{}': input size {} must be positive in every dimension", blueprint.name(), shape_str(hwc));
  if (blueprint.nodes().empty()) fail("model '{}' has no layers", blueprint.name());
  try {
    return expand_at(blueprint, options, hwc);
  } catch (const Error& e) {
    // Too small an input fails deep inside (a pooling window larger than what is left of the
    // image): say so in terms of the input, the model's smallest one.
    const int smallest = min_input_side(blueprint, options);
    if (smallest == 0 || std::min(hwc[0], hwc[1]) >= smallest) throw;
    fail("model '{}' needs inputs of at least {}x{} pixels but is given {}x{} (CompileOptions::input_hwc, or the "
         "blueprint's input(); kiln train takes the data's size): its poolings and strides shrink a smaller image to "
         "nothing (at {}x{}, {}). Use images of at least {}x{}, or a model made for smaller ones",
         blueprint.name(), smallest, smallest, hwc[0], hwc[1], hwc[0], hwc[1], e.what(), smallest, smallest);
  }
}

}  // namespace kiln
