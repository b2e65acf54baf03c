#include "cli/export_settings.h"

#include "cli/checkpoint_run_settings.h"

namespace kiln::cli {
namespace {

// --keep-bn: the flag alone that turns fold_bn off (--fold-bn's other side; a row reads and writes
// its field as it is, so this one reads and writes it the other way round).
Setting keep_bn_setting() {
  Setting s = new_setting({.key = "keep_bn",
                           .flag = "--keep-bn",
                           .help = "ONNX: keep BatchNormalization nodes instead of folding them (not with --fold-bn)",
                           .member = "ExportArgs::fold_bn",
                           .flag_only = true},
                          SettingType::Switch, {0, 1});
  s.read = [](const void* o) { return std::string(static_cast<const ExportArgs*>(o)->fold_bn ? "false" : "true"); };
  s.write = [](void* o, const std::string& t) { static_cast<ExportArgs*>(o)->fold_bn = !(t == "true" || t == "1"); };
  return s;
}

}  // namespace

const std::vector<Setting>& export_settings() {
  using A = ExportArgs;
  static const std::vector<Setting> rows = {
      checkpoint_file_setting<A>(&A::checkpoint, "ExportArgs::checkpoint"),
      text_setting<A>({.key = "onnx",
                       .flag = "--onnx",
                       .help = "write the inference program as an ONNX model (opset 17): input 'input' [N,C,H,W], "
                               "normalized as the checkpoint's metadata says; output 'logits' [N,classes]",
                       .member = "ExportArgs::onnx"},
                      &A::onnx),
      switch_setting<A>({.key = "fold_bn",
                         .flag = "--fold-bn",
                         .help = "ONNX: fold each BatchNorm after a convolution into its weight and bias (the "
                                 "default, as torch.onnx.export does in eval mode); --keep-bn keeps "
                                 "BatchNormalization nodes",
                         .member = "ExportArgs::fold_bn",
                         .flag_only = true},
                        &A::fold_bn),
      keep_bn_setting(),
      text_setting<A>({.key = "torch",
                       .flag = "--torch",
                       .help = "write the weights as PyTorch's state_dict (safetensors, torchvision's names and "
                               "layouts)",
                       .member = "ExportArgs::torch"},
                      &A::torch),
      text_choice_setting<A>({.key = "torch_conv_bias",
                              .flag = "--torch-conv-bias",
                              .help = "--torch: write a zero bias for convolutions before BatchNorm, as "
                                      "torchvision's VGG-BN has: auto (for the vgg models), zeros or none",
                              .member = "ExportArgs::conv_bias",
                              .fix = "use e.g. --torch-conv-bias zeros, or auto (the default)"},
                             &A::conv_bias, {"auto", "zeros", "none"}),
      switch_setting<A>({.key = "overwrite",
                         .flag = "--overwrite",
                         .help = "replace existing output files (never the checkpoint)",
                         .member = "ExportArgs::overwrite",
                         .flag_only = true},
                        &A::overwrite),
  };
  return rows;
}

}  // namespace kiln::cli
