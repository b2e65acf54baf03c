// The classifier head: Flatten and Reshape to (N, -1) (torch.flatten(x, 1), x.view(x.size(0), -1)),
// and the linear layers: Gemm (nn.Linear on (N, F): transB 1, its weight (out, in) as PyTorch's) and
// MatMul with the Add of its bias (nn.Linear as other exporters write it: the weight (in, out),
// transposed here to nn.Linear's; or read through a Transpose of nn.Linear's own (out, in), as
// PyTorch's dynamo exporter writes it unoptimized, import/onnx_linear_weights.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "import/onnx_linear_weights.h"
#include "import/onnx_op_table.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

// ---- Flatten, Reshape -----------------------------------------------------------------------------

// A map becomes kiln's flatten; rows (or the pooled rows ONNX holds as (N, C, 1, 1)) stay as they are.
void flatten_value(const OnnxNode& node, ImportContext& ctx, int64_t width) {
  const MappedValue x = ctx.input(node, 0);
  if (x.form == Form::Rows) {
    if (width > 0 && x.channels > 0 && width != x.channels)
      fail("'{}': {} reshapes {} features to {}: kiln reshapes (N, ...) to (N, -1) only", ctx.path(), node_label(node),
           x.channels, width);
    MappedValue v = x;
    v.one_by_one = false;
    ctx.set(node.outputs.at(0), v);
    return;
  }
  const std::string& name = ctx.layer_name(node);
  ctx.from(x).flatten(name);
  if (!x.one_by_one) ctx.checks().flattens.push_back({name, node_label(node)});
  if (width > 0) ctx.checks().features.push_back({name, node_label(node), width, false});
  ctx.produce(node, Form::Rows, x.one_by_one ? x.channels : width);
}

void check_flatten(const OnnxNode& node, ImportContext&, std::vector<std::string>& problems) {
  const int64_t axis = int_attribute(node, "axis", 1);
  if (axis != 1)
    problems.push_back(attribute_problem(node, "axis", std::to_string(axis),
                                         "kiln flattens (N, C, H, W) to (N, C*H*W), keeping the batch (axis 1)"));
}

void check_reshape(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  if (node.input(1).empty())
    problems.push_back(fmt::format("{}: it has no shape input", node_label(node)));
  else if (ctx.is_data(node.input(1)))
    problems.push_back(fmt::format("{}: its shape '{}' is computed from the data, not from shapes; kiln reshapes to a "
                                   "shape fixed at import", node_label(node), node.input(1)));
}

// The file's batch size where its input fixes one (an export with a fixed batch writes it into
// shapes it folded); 0 otherwise.
int64_t fixed_batch(const ImportContext& ctx) {
  for (const OnnxValueInfo& v : ctx.model().inputs)
    if (ctx.is_data(v.name) && !v.dims.empty()) return std::max<int64_t>(v.dims[0].value, 0);
  return 0;
}

// Whether `node` views rows (N, F) as (N, F, 1, 1) that only a flatten reads: the dynamo exporter
// writes nn.Dropout on efficientnet's pooled rows so (view(N, F, 1, 1), the mask, view(N, F)). The
// value stays kiln's rows, held as ONNX's (N, F, 1, 1) as a global pool's are (one_by_one).
bool rows_viewed_one_by_one(const OnnxNode& node, ImportContext& ctx, const Folded& shape) {
  const MappedValue x = ctx.input(node, 0);
  if (x.form != Form::Rows || shape.floating || shape.ints.size() != 4 || shape.dims.size() != 1) return false;
  const FoldedInt &n = shape.ints[0], &f = shape.ints[1];
  const bool batch = n.kind == FoldedInt::Kind::Batch ||
                     (n.kind == FoldedInt::Kind::Number && n.value > 0 && n.value == fixed_batch(ctx));
  if (!batch || f.kind != FoldedInt::Kind::Number || f.value < 1 || (x.channels > 0 && f.value != x.channels)) return false;
  for (size_t k = 2; k < 4; ++k)
    if (shape.ints[k].kind != FoldedInt::Kind::Number || shape.ints[k].value != 1) return false;
  const std::string& out = node.outputs.at(0);
  if (ctx.is_output(out) || ctx.readers(out).empty()) return false;
  for (int r : ctx.readers(out)) {
    const OnnxNode& reader = ctx.nodes()[size_t(r)];
    if (!reader.domain.empty() || (reader.op_type != "Flatten" && reader.op_type != "Reshape") || reader.input(0) != out)
      return false;
  }
  MappedValue v = x;
  v.channels = f.value;
  v.one_by_one = true;
  ctx.set(out, v);
  return true;
}

void map_reshape(const OnnxNode& node, ImportContext& ctx) {
  const Folded* shape = ctx.constant(node.input(1));
  if (!shape)
    fail("'{}': {} reshapes to a shape kiln cannot evaluate at import ('{}', computed by nodes other than "
         "Shape/Gather/Unsqueeze/Concat/Constant/Cast/Slice/Squeeze); kiln reshapes to (N, -1)", ctx.path(),
         node_label(node), node.input(1));
  const auto text = [&] {
    std::vector<std::string> parts;
    for (const FoldedInt& v : shape->ints)
      parts.push_back(v.kind == FoldedInt::Kind::Batch ? "N" : v.kind == FoldedInt::Kind::Unknown ? "?" : std::to_string(v.value));
    return fmt::format("({})", fmt::join(parts, ", "));
  };
  bool flat = shape->count() == 2 && !shape->floating;
  if (flat) {
    // The batch: the file's symbol, or a number where the export fixed it, or 0 ("keep this dimension"),
    // or -1 beside a width F (the dynamo exporter's optimized view, (-1, F)): the rest is then the
    // batch, as the width check flatten_value leaves (each sample's C*H*W is F) makes sure.
    const FoldedInt& n = shape->ints[0];
    const FoldedInt& f = shape->ints[1];
    const bool width = f.kind == FoldedInt::Kind::Number && f.value > 0;
    flat = n.kind == FoldedInt::Kind::Batch ||
           (n.kind == FoldedInt::Kind::Number && (n.value == 0 || (n.value > 0 && n.value == fixed_batch(ctx)))) ||
           (n.kind == FoldedInt::Kind::Number && n.value == -1 && width);
    flat = flat && f.kind == FoldedInt::Kind::Number && (f.value == -1 || f.value > 0);
  }
  if (!flat && rows_viewed_one_by_one(node, ctx, *shape)) return;
  // A number where the batch goes while the input's batch is symbolic: the export wrote its example's
  // batch into this shape (an export without dynamic_shapes for it, or a specialized one).
  const bool baked_batch = !shape->floating && shape->ints.size() >= 2 && fixed_batch(ctx) == 0 &&
                           shape->ints[0].kind == FoldedInt::Kind::Number && shape->ints[0].value > 0;
  if (!flat)
    fail("'{}': {} reshapes to {}; kiln reshapes a feature map to (N, -1) only, a flatten (channel shuffle's "
         "Reshape/Transpose is not imported yet){}", ctx.path(), node_label(node), text(),
         baked_batch ? fmt::format(". The file's input has a symbolic batch but this shape fixes it at {}: export "
                                   "again with the batch dynamic (torch.onnx.export's dynamic_shapes, or dynamic_axes "
                                   "with dynamo=False)", shape->ints[0].value)
                     : std::string());
  flatten_value(node, ctx, shape->ints[1].value);
}

// ---- Gemm, MatMul + Add ---------------------------------------------------------------------------

// A bias of `out` values, as (out) or (1, out): nn.Linear's (out).
bool is_bias_of(const OnnxTensor& b, int64_t out) { return b.dims == Shape{out} || b.dims == Shape{1, out}; }

// The linear layer: `weight` PyTorch's (out, in), `bias` (optional) reshaped to (out).
void map_linear(const OnnxNode& node, ImportContext& ctx, NamedTensor weight, const OnnxTensor* bias,
                const std::vector<const OnnxNode*>& outputs_of) {
  const MappedValue x = ctx.input(node, 0);
  if (x.form != Form::Rows)
    fail("'{}': {} multiplies a feature map (N, C, H, W) by a matrix; kiln's linear layers read flat features (N, F): "
         "flatten the map first (torch.flatten(x, 1))", ctx.path(), node_label(node));
  const int64_t out = weight.shape[0], in = weight.shape[1];
  if (x.channels > 0 && x.channels != in)
    fail("'{}': {} has the weight '{}' for {} features, but its input has {}", ctx.path(), node_label(node), weight.name,
         in, x.channels);
  // OnnxImportOptions::num_classes: the layer computing the file's output gives another count of
  // classes. The file's weight and bias score the file's classes, not these, so they are left out
  // and the layer starts from nn.Linear's initialization, as --new-head's does.
  const bool head = ctx.is_output(outputs_of.back()->outputs.at(0));
  const int64_t classes = head && ctx.head_classes() > 0 ? ctx.head_classes() : out;
  LinearAttrs a;
  a.out_features = int(classes);
  a.bias = bias != nullptr;
  a.init = WeightInit::torch_default();  // nn.Linear's own, for a model trained from scratch
  a.bias_init = BiasInit::TorchDefault;
  const std::string& name = ctx.layer_name(node);
  ctx.from(x).fc(a, name);
  if (x.channels <= 0) ctx.checks().features.push_back({name, node_label(node), in, true});
  if (classes != out) {
    ctx.note(fmt::format("a new head: '{}' ({}) gives {} classes where the file's gives {}; its weight '{}'{} {} left "
                         "out, and it starts from nn.Linear's initialization", name, node_label(node), classes, out,
                         weight.name, bias ? fmt::format(" and bias '{}'", bias->name) : std::string(),
                         bias ? "are" : "is"));
  } else {
    ctx.add_weight(node, name + ".weight", std::move(weight));
    if (bias) {
      NamedTensor b = named_tensor(*bias);
      b.shape = {out};
      ctx.add_weight(node, name + ".bias", std::move(b));
    }
  }
  for (const OnnxNode* n : outputs_of) ctx.produce(*n, Form::Rows, classes);
}

void check_gemm(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const size_t before = problems.size();
  ctx.check_weight(node, 1, "its weight (B)", problems);
  if (!node.input(2).empty()) ctx.check_weight(node, 2, "its bias (C)", problems);
  if (!ctx.is_data(node.input(0)))
    problems.push_back(fmt::format("{}: its input A ('{}') is a constant; kiln's linear layers read the features",
                                   node_label(node), node.input(0)));
  if (int_attribute(node, "transA", 0) != 0)
    problems.push_back(attribute_problem(node, "transA", "1", "kiln's linear layers read (N, F) rows (transA 0)"));
  for (const char* scale : {"alpha", "beta"})
    if (float_attribute(node, scale, 1.f) != 1.f)
      problems.push_back(attribute_problem(node, scale, fmt::format("{}", float_attribute(node, scale, 1.f)),
                                           "kiln's linear layer is x W^T + b (alpha and beta 1), as nn.Linear's"));
  if (problems.size() > before) return;
  const OnnxTensor& w = *ctx.stored(node.input(1));
  if (w.dims.size() != 2) {
    problems.push_back(fmt::format("{}: its weight '{}' is {}; a linear layer's is a matrix", node_label(node), w.name,
                                   shape_str(w.dims)));
    return;
  }
  const int64_t out = int_attribute(node, "transB", 0) ? w.dims[0] : w.dims[1];
  if (!node.input(2).empty() && !is_bias_of(*ctx.stored(node.input(2)), out))
    problems.push_back(fmt::format("{}: its bias '{}' is {}; kiln's linear layer adds one value per output ({} or (1, {}))",
                                   node_label(node), node.input(2), shape_str(ctx.stored(node.input(2))->dims), out, out));
}

void map_gemm(const OnnxNode& node, ImportContext& ctx) {
  const OnnxTensor& w = ctx.weight(node, 1, "its weight (B)");
  const OnnxTensor* bias = node.input(2).empty() ? nullptr : &ctx.weight(node, 2, "its bias (C)");
  const bool trans_b = int_attribute(node, "transB", 0) != 0;
  if (!trans_b) ctx.note(fmt::format("{}: its weight '{}' (in, out) is transposed to nn.Linear's (out, in)",
                                     node_label(node), w.name));
  map_linear(node, ctx, trans_b ? named_tensor(w) : transposed(w), bias, {&node});
}

// The Add that adds a bias to the MatMul's product, if it is its only reader: (the node, the bias).
std::pair<const OnnxNode*, const OnnxTensor*> bias_add(const OnnxNode& matmul, ImportContext& ctx) {
  const std::string& product = matmul.outputs.at(0);
  if (ctx.readers(product).size() != 1 || ctx.is_output(product)) return {nullptr, nullptr};
  const OnnxNode& add = ctx.nodes()[size_t(ctx.readers(product)[0])];
  if (!add.domain.empty() || add.op_type != "Add" || add.inputs.size() != 2) return {nullptr, nullptr};
  const std::string& other = add.inputs[0] == product ? add.inputs[1] : add.inputs[0];
  const OnnxTensor* b = ctx.stored(other);
  const OnnxTensor* w = ctx.stored(matmul.input(1));
  if (!b || !b->floating || !w || w->dims.size() != 2 || !is_bias_of(*b, w->dims[weight_out_in(matmul) ? 0 : 1]))
    return {nullptr, nullptr};
  return {&add, b};
}

std::vector<std::string> matmul_parameters(const OnnxNode& node, ImportContext& ctx) {
  std::vector<std::string> names = {node.input(1)};
  if (const OnnxTensor* b = bias_add(node, ctx).second) names.push_back(b->name);
  return names;
}

void check_matmul(const OnnxNode& node, ImportContext& ctx, std::vector<std::string>& problems) {
  const size_t before = problems.size();
  ctx.check_weight(node, 1, "its weight (B)", problems);
  if (!ctx.is_data(node.input(0)))
    problems.push_back(fmt::format("{}: its input A ('{}') is a constant; kiln's linear layers read the features",
                                   node_label(node), node.input(0)));
  if (problems.size() == before && ctx.stored(node.input(1))->dims.size() != 2)
    problems.push_back(fmt::format("{}: its weight '{}' is {}; a linear layer's is a matrix (in, out)", node_label(node),
                                   node.input(1), shape_str(ctx.stored(node.input(1))->dims)));
}

void map_matmul(const OnnxNode& node, ImportContext& ctx) {
  const OnnxTensor& w = ctx.weight(node, 1, "its weight (B)");
  const auto [add, bias] = bias_add(node, ctx);
  std::vector<const OnnxNode*> outputs_of = {&node};
  if (add) {
    ctx.absorb(*add);
    outputs_of.push_back(add);
  }
  if (weight_out_in(node)) {  // read through a Transpose: already nn.Linear's (out, in)
    map_linear(node, ctx, named_tensor(w), bias, outputs_of);
    return;
  }
  ctx.note(fmt::format("{}: its weight '{}' (in, out) is transposed to nn.Linear's (out, in)", node_label(node), w.name));
  map_linear(node, ctx, transposed(w), bias, outputs_of);
}

}  // namespace

const std::vector<OnnxOp> kHeadOps = {
    {"", "Flatten", nullptr, check_flatten, [](const OnnxNode& n, ImportContext& c) { flatten_value(n, c, -1); }},
    {"", "Reshape", nullptr, check_reshape, map_reshape},
    {"", "Gemm",
     [](const OnnxNode& n, ImportContext&) {
       std::vector<std::string> names = {n.input(1)};
       if (!n.input(2).empty()) names.push_back(n.input(2));
       return names;
     },
     check_gemm, map_gemm},
    {"", "MatMul", matmul_parameters, check_matmul, map_matmul},
};

}  // namespace kiln::onnx_import
