// import_onnx: the file read (onnx_file_reader), its graph ordered and checked (onnx_graph_order),
// the activation patterns recognized (onnx_patterns), every node checked against the op table before
// any is mapped (all refusals listed at once), the layers with parameters named after their
// initializers, the nodes mapped in order (onnx_ops_*.cpp), then the checks that need the
// Blueprint's shapes (onnx_import_checks) and the weights that do (onnx_flatten_columns).
#include "kiln/onnx_import.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <memory>
#include <optional>
#include <set>

#include "core/file_io.h"
#include "import/onnx_file_reader.h"
#include "import/onnx_flatten_columns.h"
#include "import/onnx_graph_order.h"
#include "import/onnx_import_bytes.h"
#include "import/onnx_import_checks.h"
#include "import/onnx_import_context.h"
#include "import/onnx_op_table.h"
#include "import/onnx_patterns.h"
#include "import/onnx_stochastic_depth.h"
#include "import/sha256.h"
#include "kiln/error.h"

namespace kiln {
namespace {

using namespace onnx_import;

constexpr const char* kExportHint =
    "export one from PyTorch with torch.onnx.export(model, torch.randn(1, 3, 224, 224), path, "
    "training=torch.onnx.TrainingMode.TRAINING, dynamic_axes={'input': {0: 'N'}}, input_names=['input'])";

// The graph's one image input, NCHW float: its channels, and the height and width kiln builds for.
struct InputGeometry {
  std::string name;
  int64_t channels = 0, height = 0, width = 0;
};

InputGeometry input_geometry(const OnnxModel& model, const OnnxImportOptions& options) {
  const std::vector<std::string> inputs = data_inputs(model);
  if (inputs.size() != 1)
    fail("'{}' has {} inputs ({}); kiln trains models of one image input (N, C, H, W)", model.path, inputs.size(),
         fmt::join(inputs, ", "));
  const OnnxValueInfo* v = nullptr;
  for (const OnnxValueInfo& i : model.inputs)
    if (i.name == inputs[0]) v = &i;
  if (v->elem_type != kOnnxFloat)
    fail("'{}': its input '{}' is of ONNX element type {}, not float32; kiln's models read float32 images (export "
         "with a float32 example input)", model.path, v->name, v->elem_type);
  if (!v->has_shape || v->dims.size() != 4)
    fail("'{}': its input '{}' has {}; kiln's models read images (N, C, H, W)", model.path, v->name,
         v->has_shape ? fmt::format("{} dimensions", v->dims.size()) : std::string("no declared shape"));
  InputGeometry g;
  g.name = v->name;
  g.channels = v->dims[1].value;
  if (g.channels <= 0)
    fail("'{}': its input '{}' leaves the channels ('{}') open; kiln needs them fixed: export with a fixed channel "
         "count (only the batch, dimension 0, may be symbolic)", model.path, v->name, v->dims[1].param);
  if ((options.height > 0) != (options.width > 0))
    fail("OnnxImportOptions: give both the height ({}) and the width ({}) of the input, or neither", options.height,
         options.width);
  g.height = options.height > 0 ? options.height : v->dims[2].value;
  g.width = options.width > 0 ? options.width : v->dims[3].value;
  if (g.height <= 0 || g.width <= 0)
    fail("'{}': its input '{}' leaves its height and width open ('{}' x '{}'); give the size to build the model for "
         "(OnnxImportOptions::height and width), or export with a fixed one", model.path, v->name,
         v->dims[2].value > 0 ? std::to_string(v->dims[2].value) : v->dims[2].param,
         v->dims[3].value > 0 ? std::to_string(v->dims[3].value) : v->dims[3].param);
  return g;
}

std::string model_name(const OnnxModel& model) {
  if (const auto it = model.metadata.find("model"); it != model.metadata.end() && !it->second.empty()) return it->second;
  if (!model.graph_name.empty()) return model.graph_name;
  return std::filesystem::path(model.path).stem().string();
}

// Every node the handlers cannot take, listed at once, before anything is built.
void check_nodes(ImportContext& ctx) {
  std::vector<std::string> problems;
  for (const OnnxNode& node : ctx.nodes()) {
    if (!ctx.reads_data(node)) continue;  // a constant: folded where it is read
    const OnnxOp* op = find_onnx_op(node);
    if (!op) problems.push_back(fmt::format("{}: {}", node_label(node), unsupported_op_hint(node)));
    else if (op->check) op->check(node, ctx, problems);
  }
  if (problems.empty()) return;
  std::string list;
  for (const std::string& p : problems) list += "\n  " + p;
  fail("'{}' holds {} node{} kiln cannot train as written; nothing was imported:{}", ctx.path(), problems.size(),
       problems.size() == 1 ? "" : "s", list);
}

// Whether `n` normalizes: a BatchNorm, or a GroupNorm or LayerNorm (as ONNX's own node or the kiln
// node the patterns make of PyTorch's forms: GroupNorm of the InstanceNormalization it is written as).
bool normalizes(const OnnxNode& n) {
  static const char* const onnx_ops[] = {"BatchNormalization", "LayerNormalization", "GroupNormalization",
                                         "InstanceNormalization"};
  static const char* const kiln_ops[] = {"GroupNorm", "LayerNorm2d"};
  const auto named = [&](const auto& ops) {
    return std::any_of(std::begin(ops), std::end(ops), [&](const char* op) { return n.op_type == op; });
  };
  return n.domain.empty() ? named(onnx_ops) : n.domain == kKilnDomain && named(kiln_ops);
}

// The notes of what the file is: BatchNorm folded away by an eval-mode export, biases folded.
void add_notes(ImportContext& ctx) {
  int convs = 0, norms = 0;
  for (const OnnxNode& n : ctx.nodes()) {
    convs += n.domain.empty() && n.op_type == "Conv";
    norms += normalizes(n);
  }
  if (convs > 0 && norms == 0)  // none at all: a network normalized by GroupNorm or LayerNorm lost nothing
    ctx.note(fmt::format(
        "no BatchNormalization node among {} convolutions: it trains as written, without normalization. If the "
        "network has BatchNorm, an eval-mode export (torch.onnx.export's default) folded it into the convolutions' "
        "weights and biases; export with training=torch.onnx.TrainingMode.TRAINING (or PRESERVE) to keep it", convs));
  const std::vector<std::string>& biases = ctx.folded_biases();
  if (!biases.empty())
    ctx.note(fmt::format("{} convolution bias{} before a BatchNorm ('{}'{}) folded into the BatchNorm's running mean "
                         "(BN(x + b) with mean m is BN(x) with mean m - b; in training the batch mean cancels b), so the "
                         "convolution and its BatchNorm fuse as kiln's own do",
                         biases.size(), biases.size() == 1 ? "" : "es", biases[0],
                         biases.size() == 1 ? "" : fmt::format(" and {} more", biases.size() - 1)));
}

// What the patterns know of a value's shape before the graph is mapped: for a value computed from
// the input (not through Shape), that its first dimension is the batch, as every map and row of
// kiln's has it (the rank taken as a map's, 4; its other dimensions unknown). Enough for the size
// torchvision's stochastic depth draws its noise at, [x.shape[0], 1, 1, 1], and never a wrong number.
ConstantFolder::ShapeOf batch_first_shapes(const OnnxModel& model, const GraphOrder& order) {
  auto data = std::make_shared<std::set<std::string>>();
  for (const std::string& in : data_inputs(model)) data->insert(in);
  for (int p : order.nodes) {
    const OnnxNode& n = model.nodes[size_t(p)];
    if (n.op_type == "Shape" && n.domain.empty()) continue;  // dimensions, a constant
    // CastLike reads only its first input's values (the second's type); a damaged file's may have none.
    const size_t read = n.op_type == "CastLike" && n.domain.empty() ? std::min<size_t>(1, n.inputs.size()) : n.inputs.size();
    if (std::any_of(n.inputs.begin(), n.inputs.begin() + std::ptrdiff_t(read), [&](const std::string& v) { return data->count(v) > 0; }))
      for (const std::string& out : n.outputs) data->insert(out);
  }
  return [data](const std::string& value) -> std::optional<std::vector<FoldedInt>> {
    if (!data->count(value)) return std::nullopt;
    return std::vector<FoldedInt>{FoldedInt::batch(), FoldedInt::unknown(), FoldedInt::unknown(), FoldedInt::unknown()};
  };
}

}  // namespace

ImportedModel import_onnx(const std::string& path, const OnnxImportOptions& options) {
  onnx_import::ExternalData external(std::filesystem::path(path).parent_path(), path);
  return onnx_import::import_onnx_bytes(read_file_bytes(path, kExportHint), path, options, external);
}

ImportedModel onnx_import::import_onnx_bytes(std::span<const uint8_t> bytes, const std::string& path,
                                             const OnnxImportOptions& options) {
  ExternalData none(std::nullopt, path);
  return import_onnx_bytes(bytes, path, options, none);
}

ImportedModel onnx_import::import_onnx_bytes(std::span<const uint8_t> bytes, const std::string& path,
                                             const OnnxImportOptions& options, ExternalData& external) {
  ImportedModel result;
  result.path = path;
  const OnnxModel model = parse_onnx_model(bytes, path, external);
  result.sha256 = sha256_hex(bytes);
  if (!external.files().empty()) {
    std::string digests = result.sha256;
    for (const std::filesystem::path& file : external.files()) {
      const std::vector<uint8_t> data = read_file_bytes(file.string(), kExportHint);
      digests += sha256_hex(data);
    }
    result.sha256 = sha256_hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(digests.data()), digests.size()));
  }
  if (model.opset < 0)
    fail("'{}' declares no opset for ONNX's operators (its opset_import has no default domain): the file is truncated "
         "or damaged; export it again", path);
  if (model.opset < 7)
    fail("'{}' is written at opset {}; kiln reads opsets 7 and up (PyTorch writes 13 and up): export it again",
         path, model.opset);
  if (model.outputs.size() != 1)
    fail("'{}' has {} outputs; kiln trains models of one output, the logits (N, classes) (a model with auxiliary heads: "
         "export it in eval mode or without them)", path, model.outputs.size());
  if (options.num_classes < 0)
    fail("OnnxImportOptions: num_classes is {}; give the classes the model is to give (>= 1), or 0 for the file's",
         options.num_classes);
  const InputGeometry in = input_geometry(model, options);
  const std::string& output = model.outputs[0].name;
  const GraphOrder order = order_graph(model, {output});

  ConstantFolder constants(model, order, batch_first_shapes(model, order));
  std::vector<OnnxNode> nodes = recognize_activation_patterns(model, order, constants);
  recognize_exported_stochastic_depth(nodes, model);  // kiln's own Identity nodes listed in the metadata
  Blueprint blueprint(model_name(model));
  blueprint.input(int(in.height), int(in.width), int(in.channels));
  ImportContext ctx(model, order, std::move(nodes), blueprint);
  ctx.set(in.name, {blueprint.source(), Form::Map, in.channels});
  ctx.set_head_classes(options.num_classes);
  check_nodes(ctx);
  // Layers with parameters take their initializers' module names before other layers are named.
  for (const OnnxNode& node : ctx.nodes()) {
    const OnnxOp* op = ctx.reads_data(node) ? find_onnx_op(node) : nullptr;
    if (!op || !op->parameters) continue;
    std::vector<std::string> initializers = op->parameters(node, ctx);
    for (std::string& name : initializers)  // through Identity nodes, to the initializer's own name
      if (const OnnxTensor* t = ctx.stored(name)) name = t->name;
    if (const std::optional<std::string> module = shared_module(initializers)) ctx.reserve_name(node, *module);
  }
  for (const OnnxNode& node : ctx.nodes())
    if (ctx.reads_data(node) && !ctx.absorbed(node)) find_onnx_op(node)->map(node, ctx);

  if (!ctx.mapped(output) || output == in.name)
    fail("'{}': its output '{}' is {}; kiln trains a network computing logits from its input", path, output,
         output == in.name ? "the input itself" : "a constant");
  const MappedValue& logits = ctx.value(output);
  if (logits.form != Form::Rows)
    fail("'{}': its output '{}' is a feature map (N, C, H, W); kiln trains classifiers, whose output is the logits "
         "(N, classes): end the model with a linear layer or a global pooling", path, output);
  if (logits.ref.node() != blueprint.last().node())
    fail("internal: the output '{}' of '{}' is not the imported Blueprint's last layer; please report it with the file",
         output, path);
  reorder_channels_last_columns(check_blueprint_shapes(blueprint, ctx.checks(), model), ctx);
  add_notes(ctx);

  result.blueprint = blueprint;
  result.weights = std::move(ctx.weights());
  result.kiln_tensor = std::move(ctx.kiln_tensors());
  result.metadata = model.metadata;
  result.notes = std::move(ctx.notes());
  result.opset = model.opset;
  result.producer = model.producer_version.empty() ? model.producer_name
                                                   : model.producer_name + " " + model.producer_version;
  return result;
}

}  // namespace kiln
