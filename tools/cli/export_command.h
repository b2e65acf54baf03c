#pragma once
// `kiln export --checkpoint C --onnx M.onnx --torch W.safetensors`: a checkpoint of kiln train as an
// ONNX model of its inference program and/or as PyTorch's state_dict of the same model, through the
// library's exporters (kiln/export.h).
#include <CLI/CLI.hpp>

#include <string>

namespace kiln::cli {

// Its fields are rows of cli/export_settings.h, which give them their flags.
struct ExportArgs {
  std::string checkpoint, onnx, torch;
  bool fold_bn = true;         // --fold-bn / --keep-bn (OnnxExportOptions::fold_bn)
  std::string conv_bias = "auto";  // --torch-conv-bias auto|zeros|none (TorchExportOptions::conv_bias_before_bn)
  bool overwrite = false;
};

CLI::App* add_export_command(CLI::App& app, ExportArgs& args);
int run_export(const ExportArgs& args);

}  // namespace kiln::cli
