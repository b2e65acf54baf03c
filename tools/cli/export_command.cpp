#include "cli/export_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>
#include <vector>

#include "cli/export_settings.h"
#include "cli/model_source.h"
#include "cli/named_setting_options.h"
#include "export/onnx_graph.h"
#include "export/output_path.h"
#include "kiln/checkpoint.h"
#include "kiln/error.h"
#include "kiln/export.h"
#include "kiln/trainer.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

std::string recipe_value(const SafetensorsFile& file, const std::string& path, const std::string& key) {
  auto it = file.metadata.find("recipe." + key);
  if (it == file.metadata.end())
    fail("checkpoint '{}' does not record its '{}'; export a checkpoint written by kiln train", path, key);
  return it->second;
}

int positive(const std::string& text, const std::string& path, const std::string& key) {
  size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (used != text.size() || value <= 0) fail("checkpoint '{}' has a malformed '{}': '{}'", path, key, text);
  return value;
}

// "HxWxC", as the recipe records the input.
Shape input_hwc(const std::string& text, const std::string& path) {
  Shape hwc;
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t x = text.find('x', start);
    if ((x == std::string::npos) != (i == 2)) fail("checkpoint '{}' has a malformed 'input': '{}'", path, text);
    hwc.push_back(positive(text.substr(start, x == std::string::npos ? x : x - start), path, "input"));
    start = x + 1;
  }
  return hwc;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec);
}

std::string megabytes(int64_t bytes) { return fmt::format("{:.1f} MB", double(bytes) / 1e6); }

// Everything that can be checked before the checkpoint is read, so that a refused export costs nothing
// and writes nothing.
void check_outputs(const ExportArgs& a) {
  if (a.onnx.empty() && a.torch.empty())
    fail("kiln export needs something to write: --onnx FILE (the inference graph as an ONNX model) and/or --torch "
         "FILE (the weights as PyTorch's state_dict)");
  if (!fs::exists(a.checkpoint))
    fail("checkpoint '{}' does not exist; give a checkpoint written by kiln train (--checkpoint)", a.checkpoint);
  if (!a.onnx.empty() && !a.torch.empty() && (a.onnx == a.torch || same_file(a.onnx, a.torch)))
    fail("--onnx and --torch both name '{}'; give each file its own path", a.onnx);
  for (const std::string* out : {&a.onnx, &a.torch})
    if (!out->empty() && (*out == a.checkpoint || same_file(*out, a.checkpoint)))
      fail("'{}' is the checkpoint being exported; write the export to another path (--overwrite never replaces "
           "the checkpoint)", *out);
  if (!a.onnx.empty()) onnx_export::require_onnx_library(a.onnx);
  if (!a.onnx.empty()) export_layout::check_output_path(a.onnx, a.overwrite, "ONNX model", "--overwrite");
  if (!a.torch.empty()) export_layout::check_output_path(a.torch, a.overwrite, "state_dict", "--overwrite");
}

std::string op_counts(const std::map<std::string, int>& counts) {
  std::vector<std::pair<int, std::string>> sorted;
  for (const auto& [op, n] : counts) sorted.emplace_back(-n, op);
  std::sort(sorted.begin(), sorted.end());
  std::string s;
  for (const auto& [n, op] : sorted) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", -n, op);
  return s;
}

}  // namespace

CLI::App* add_export_command(CLI::App& app, ExportArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "export", "write a checkpoint as an ONNX model (--onnx) and/or as PyTorch's state_dict (--torch)");
  // Its flags (cli/export_settings.h): --checkpoint, --onnx, --fold-bn/--keep-bn, --torch,
  // --torch-conv-bias, --overwrite.
  add_named_setting_options(cmd, export_settings(), a, {{"checkpoint", "FILE"}, {"onnx", "FILE"}, {"torch", "FILE"}});
  cmd->get_option("--checkpoint")->required();
  cmd->get_option("--fold-bn")->excludes(cmd->get_option("--keep-bn"));
  return cmd;
}

int run_export(const ExportArgs& a) {
  check_outputs(a);
  const SafetensorsFile file = load_safetensors(a.checkpoint);
  const std::string model = recipe_value(file, a.checkpoint, "model");
  const int classes = positive(recipe_value(file, a.checkpoint, "classes"), a.checkpoint, "classes");
  // The program is compiled on the CPU in fp32 whatever trained it: the checkpoint holds fp32 master
  // weights, and the exported graph has its own batch dimension, so one image is compiled for.
  CompileOptions c;
  c.batch = 1;
  c.input_hwc = input_hwc(recipe_value(file, a.checkpoint, "input"), a.checkpoint);
  // A run from an ONNX file (kiln train --model net.onnx) is rebuilt from that file, refused once it changed.
  const ModelSource source = recorded_model(a.checkpoint, file.metadata, classes, int(c.input_hwc[0]),
                                            int(c.input_hwc[1]));
  Trainer trainer(source.blueprint, c, TrainOptions{});
  trainer.load_weights(a.checkpoint);
  const ExportedModelInfo info = exported_model_info(trainer);
  const std::string shape =
      fmt::format("input [N,{},{},{}], logits [N,{}]", c.input_hwc[2], c.input_hwc[0], c.input_hwc[1], classes);
  if (!a.onnx.empty()) {
    OnnxExportOptions o;
    o.fold_bn = a.fold_bn, o.overwrite = a.overwrite, o.info = info;
    const OnnxExportSummary s = export_onnx(trainer.executable(), a.onnx, o);
    fmt::print("kiln export: wrote {} ({}): ONNX opset {}, {}; {} nodes: {}; BatchNorm {}\n", a.onnx, megabytes(s.bytes),
               s.opset, shape, s.nodes, op_counts(s.op_counts),
               a.fold_bn ? "folded into the convolutions" : "kept as BatchNormalization nodes");
  }
  if (!a.torch.empty()) {
    TorchExportOptions o;
    o.overwrite = a.overwrite, o.info = info;
    // The zoo's VGG models are torchvision's make_layers, whose convolutions carry a bias.
    o.conv_bias_before_bn = a.conv_bias == "zeros" || (a.conv_bias == "auto" && model.rfind("vgg", 0) == 0);
    const TorchExportSummary s = export_torch_weights(trainer.executable(), a.torch, o);
    fmt::print("kiln export: wrote {} ({}): PyTorch state_dict of {}, {} tensors with torchvision's names{}\n", a.torch,
               megabytes(s.bytes), model, s.tensors, o.conv_bias_before_bn ? " (zero convolution biases before BN)" : "");
  }
  return 0;
}

}  // namespace kiln::cli
