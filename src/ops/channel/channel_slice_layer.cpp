// Channels [start, start + count) of the input, PyTorch's x.narrow(1, start, count): of an NHWC map
// (kiln's channels are the last axis) or of flat N x F features. x.chunk(2, dim=1)'s halves are two
// such slices of one input (ShuffleNetV2's stride-1 unit). A slice of every channel is the identity
// (its output and its input's gradient are views, no op runs); any other copies its channels with
// one CHANNEL_SLICE_FWD (training and inference).
//
// The backward. A tensor read by several layers gets the sum of their gradients: each reader writes a
// gradient of the whole tensor into a slot of its own and a GRAD_SUM adds the slots
// (LowerContext::grad_out). For slices that would mean, per slice, a tensor of x's size that is
// mostly zeros, and a sum reading them all: for a chunk's two halves six passes over x's size where
// two suffice. So when every reader of x is a slice and the slices lie side by side without overlap
// (a chunk's halves, or any run of neighbouring ranges), the first of them in the graph, whose
// backward is lowered after every other's gradient is complete, writes x's whole gradient with one
// CHANNEL_SLICE_BWD: each slice's gradient copied into its channels, zeros in channels none took;
// the others emit nothing, and no GRAD_SUM runs. Any other reader (slices that overlap or leave a gap
// between them, x also read by a non-slice layer): each slice writes its slot (its gradient in its
// channels, zeros elsewhere) with its own CHANNEL_SLICE_BWD and the compiler's GRAD_SUM adds them.
#include <algorithm>
#include <optional>
#include <vector>

#include "compile/layer_def.h"
#include "ops/channel/channel_contract.h"

namespace kiln {
namespace {

const ChannelSliceAttrs& slice_of(const Layer& layer) { return attrs_of<ChannelSliceAttrs>(layer); }

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_input(layer, inputs);
  if (x.size() != 4 && x.size() != 2)
    fail("channel_slice '{}': takes channels of a feature map (N,H,W,C) or features of flat (N,F) rows, but its input "
         "is {}",
         layer.name, shape_str(x));
  const ChannelSliceAttrs& a = slice_of(layer);
  const int64_t channels = x.back();
  if (a.start + int64_t{a.count} > channels)
    fail("channel_slice '{}': channels [{}, {}) reach past the {} channels of its input {}; {}", layer.name, a.start,
         a.start + int64_t{a.count}, channels, shape_str(x),
         a.start < channels ? fmt::format("take at most {} channels from channel {}", channels - a.start, a.start)
                            : fmt::format("start below channel {}", channels));
  Shape y = x;
  y.back() = a.count;
  return y;
}

int64_t input_channels(const LowerContext& ctx, int index) {
  return ctx.layer(ctx.layer(index).inputs.at(0)).out_shape.back();
}

bool is_identity(const LowerContext& ctx, int index) {
  const ChannelSliceAttrs& a = slice_of(ctx.layer(index));
  return a.start == 0 && a.count == input_channels(ctx, index);
}

// Slices of one input that lie side by side, in channel order, from channel `start`.
struct SiblingRun {
  std::vector<int> slices;
  int start = 0;
};

// The run `index` belongs to when every reader of its input is a slice and together they take one
// run of neighbouring channels, two slices or more; none otherwise.
std::optional<SiblingRun> sibling_run(const LowerContext& ctx, int index) {
  const std::vector<Layer>& layers = ctx.program.graph.layers;
  const int producer = layers.at(size_t(index)).inputs.at(0);
  SiblingRun run;
  for (size_t c = 0; c < layers.size(); ++c)
    for (int in : layers[c].inputs) {
      if (in != producer) continue;
      if (layers[c].kind != LayerKind::ChannelSlice) return std::nullopt;
      run.slices.push_back(int(c));
    }
  if (run.slices.size() < 2) return std::nullopt;
  std::sort(run.slices.begin(), run.slices.end(),
            [&](int a, int b) { return slice_of(layers[size_t(a)]).start < slice_of(layers[size_t(b)]).start; });
  run.start = slice_of(layers[size_t(run.slices[0])]).start;
  int end = run.start;
  for (int s : run.slices) {
    const ChannelSliceAttrs& a = slice_of(layers[size_t(s)]);
    if (a.start != end) return std::nullopt;  // overlapping, or a gap between two
    end += a.count;
  }
  return run;
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  if (is_identity(ctx, index)) {
    ctx.set_out(index, ctx.view(layer.name, layer.out_shape, ctx.in(index, 0)));
    ctx.set_infer_out(index, ctx.view(layer.name + ":inf", layer.out_shape, ctx.infer_in(index, 0)));
    return;
  }
  const int start = slice_of(layer).start;
  const int y = ctx.activation(layer.name, layer.out_shape);
  ctx.forward(make_op(ChannelSliceForward<TensorId>{ctx.in(index, 0), y, start}, index));
  ctx.set_out(index, y);
  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(make_op(ChannelSliceForward<TensorId>{ctx.infer_in(index, 0), yi, start}, index));
  ctx.set_infer_out(index, yi);
}

// The run's first slice in the graph writes the input's whole gradient from every slice's.
void lower_run_backward(LowerContext& ctx, int index, const SiblingRun& run) {
  if (index != *std::min_element(run.slices.begin(), run.slices.end())) return;
  std::vector<TensorId> dys;
  for (int s : run.slices) dys.push_back(ctx.grad_out(s));
  const int producer = ctx.layer(index).inputs.at(0);
  const TensorSpec& x = ctx.program.tensors.at(size_t(ctx.out(producer)));
  const int dx = ctx.activation("d:" + ctx.layer(producer).name, x.shape, x.dtype);
  ctx.backward(make_op(ChannelSliceBackward<TensorId>{dx, dys, run.start}, index));
  // set_loss_grad is how a layer's output is handed its whole gradient (the loss hands the last
  // layer's so): the producer's grad_out returns dx, and no slot or GRAD_SUM is made for its readers.
  ctx.set_loss_grad(producer, dx);
}

void lower_backward(LowerContext& ctx, int index) {
  if (ctx.input_is_data(index, 0)) return;
  const Layer& layer = ctx.layer(index);
  if (is_identity(ctx, index)) {  // a view, as flatten's: dy may be the program's output gradient
    const Shape& x = ctx.layer(layer.inputs.at(0)).out_shape;
    ctx.set_grad_in(index, 0, ctx.view("d:" + layer.name + ":in", x, ctx.grad_out(index)));
    return;
  }
  if (const std::optional<SiblingRun> run = sibling_run(ctx, index)) return lower_run_backward(ctx, index, *run);
  ctx.backward(make_op(
      ChannelSliceBackward<TensorId>{ctx.grad_in(index, 0), {ctx.grad_out(index)}, slice_of(layer).start}, index));
}

}  // namespace

extern const LayerDef kChannelSliceLayer{LayerKind::ChannelSlice, infer, lower_forward, lower_backward};

}  // namespace kiln
