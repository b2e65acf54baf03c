#pragma once
// Models out of kiln, for other tools: the inference program as an ONNX model (export_onnx, for
// onnxruntime, TensorRT, OpenVINO, ...) and the weights as PyTorch's state_dict of the same model
// (export_torch_weights: torchvision's names and layouts, the inverse of kiln::load_torch_weights).
// Both read an Executable's parameters and BN running statistics as they are; neither changes it.
// Library kiln_export (CMake target of cmake/onnx.cmake), above the engine: the ONNX writer needs
// Debian's libonnx-dev, which kiln::kiln does not.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/executable.h"
#include "kiln/trainer.h"

namespace kiln {

// What a model's files record besides its weights: what the inputs must be and what the outputs
// mean. Written into the ONNX model's metadata_props (and the safetensors metadata of a state_dict)
// under the keys a kiln checkpoint uses: "model", "norm_mean", "norm_std" (comma-separated, one per
// channel: inputs are (pixel / 255 - mean) / std), "class_names" (a JSON array). Empty fields are
// left out.
struct ExportedModelInfo {
  std::string model;                     // the Blueprint's name ("resnet50")
  std::vector<float> mean, std;          // the normalization of the input channels
  std::vector<std::string> class_names;  // one per logit, or none
};

// The model name, normalization and class names a Trainer holds (from its data or the checkpoint it
// loaded).
ExportedModelInfo exported_model_info(const Trainer& trainer);

struct OnnxExportOptions {
  // Fold each BatchNorm that follows a convolution into that convolution's weight and bias (in
  // double precision, then rounded once), as torch.onnx.export does for a model in eval mode: the
  // graph an inference runtime wants, with fewer nodes and passes. false keeps BatchNormalization
  // nodes (on the running statistics), for tools that read or retrain the normalization. A
  // BatchNorm after anything else is always kept.
  bool fold_bn = true;
  // Replace an existing file at the path; without it an existing file is refused and left as it was.
  bool overwrite = false;
  ExportedModelInfo info;
};

struct OnnxExportSummary {
  int opset = 0;
  int64_t nodes = 0;
  std::map<std::string, int> op_counts;  // "Conv" -> 20, ...
  int64_t bytes = 0;                     // of the file written
};

// Writes the eval-mode program of `exe` (BN on its running statistics, dropout as ONNX's Dropout,
// the identity in inference, so that kiln::import_onnx gets the layer back; stochastic depth as an
// Identity node listed with its p in the metadata entry "kiln.stochastic_depth", for the same) to
// `path` as an ONNX model, opset 17: input "input", float32 [N, C, H, W] (NCHW, N symbolic: any
// batch), already normalized as `options.info` says; output "logits", float32 [N, classes], before
// any softmax. Convolution weights are written OIHW, and a linear layer that reads a flattened
// feature map gets its columns in PyTorch's C,H,W order (kiln flattens H,W,C), so the graph reads
// as PyTorch's. The model is checked by onnx::checker and ONNX shape inference before it is written,
// atomically (a temporary file renamed over `path`). kiln::Error, with nothing written, for: an
// existing file without `overwrite`, a folder that does not exist or cannot be written, a layer the
// exporter has no ONNX form for, a model over protobuf's 2 GiB limit, and a kiln built without
// libonnx-dev (onnx_export_available()).
OnnxExportSummary export_onnx(Executable& exe, const std::string& path, const OnnxExportOptions& options = {});

// Whether this kiln was built with the ONNX library (Debian's libonnx-dev; scripts/setup.sh installs
// it); export_onnx refuses to run otherwise.
bool onnx_export_available();

struct TorchExportOptions {
  bool overwrite = false;  // as OnnxExportOptions::overwrite
  // Also write a zero bias for every convolution that a BatchNorm follows: torchvision's VGG-BN
  // convolutions have one (BN cancels it; kiln's fused Conv + BN has none), so its state_dict loads
  // with strict=True only with them. load_torch_weights folds such a bias into the running mean, so
  // zeros read back as the same model.
  bool conv_bias_before_bn = false;
  ExportedModelInfo info;  // into the file's metadata
};

struct TorchExportSummary {
  int tensors = 0;  // written
  int64_t bytes = 0;
};

// Writes every parameter and BN running statistic of `exe` as PyTorch's state_dict of the same
// model, in safetensors (safetensors.torch.load_file reads it, and model.load_state_dict(..., strict=True)
// takes it: BN's num_batches_tracked counters, which kiln does not keep, are left out, and PyTorch
// fills them in for a state_dict without its version metadata; bench/torch_load_kiln_export.py):
// names as kiln::torch_names gives them, convolutions OIHW, the
// first linear layer after a flattened feature map with its columns in C,H,W order, float32. The
// exact inverse of load_torch_weights: loading the file back gives the same bytes. Written
// atomically; an existing file is refused unless `overwrite`.
TorchExportSummary export_torch_weights(Executable& exe, const std::string& path,
                                        const TorchExportOptions& options = {});

}  // namespace kiln
