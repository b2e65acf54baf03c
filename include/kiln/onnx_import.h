#pragma once
// Models into kiln from ONNX files: a CNN that torch.onnx.export (or kiln's own `export --onnx`)
// wrote becomes a kiln::Blueprint, compiled, trained and fused as kiln's own models are, with the
// file's weights. Library kiln_export (cmake/onnx.cmake), beside the exporters: the reader goes
// through Debian's libonnx-dev, which kiln::kiln does not link.
//
// What it reads: one input, float32 NCHW [N, C, H, W] (N symbolic or fixed: kiln chooses the batch;
// C fixed; H and W fixed or given in OnnxImportOptions), one output of (N, classes) logits, and nodes
// of these operators (ONNX's default domain, the forms PyTorch's exporter writes at opsets 13 and up):
// Conv (groups, dilations, pads, strides, bias), BatchNormalization, Relu, Clip (0, 6) as ReLU6,
// LeakyRelu, Elu, Sigmoid, HardSigmoid (PyTorch's), HardSwish, Tanh, Gelu, Mul (maps of one shape,
// or a map and an (N, C, 1, 1) gate), Add, Concat (channels), MaxPool, AveragePool,
// GlobalAveragePool, ReduceMean over (H, W), Flatten, Reshape to (N, -1), Gemm and MatMul (+ Add)
// over flat features, Dropout, Identity, Slice, Split and SplitToSequence/SequenceAt of the
// channels, Pad of the height and width by constant amounts before the one Conv, MaxPool or AveragePool
// reading it (zeros, -inf before a MaxPool: folded into that layer's padding); Shape/Gather/Unsqueeze/Concat/Constant subgraphs computing
// a Reshape's shape are evaluated at import; x * Sigmoid(x), x * HardSigmoid(x) and the Erf form of
// GELU become SiLU, hard-swish and GELU. An operator or attribute kiln cannot train is refused
// before anything is built, every such node listed at once.
#include <map>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/executable.h"
#include "kiln/safetensors.h"
#include "kiln/torch_weights.h"

namespace kiln {

struct OnnxImportOptions {
  // The input's height and width: needed where the file leaves them symbolic, and used over the
  // file's where given (both or neither). 0: the file's.
  int height = 0, width = 0;
  // The classes the model is to give (kiln train --model net.onnx on a dataset of other classes).
  // 0: the file's. Where the linear layer computing the file's output gives another count, it gets
  // this many outputs, a new head: its weight and bias are left out of ImportedModel::weights (they
  // are for the file's classes), so it starts from nn.Linear's initialization, and a note says so.
  int num_classes = 0;
};

struct ImportedModel {
  // The model: its name from the file's metadata "model" (kiln's exports), else the graph's name,
  // else the file's; its input (H, W, C) from the file (or the options).
  Blueprint blueprint;
  // The parameters and BatchNorm running statistics, in PyTorch's layouts (convolutions OIHW, linear
  // layers (out, in)), named as the file's initializers, in the file's dtype where they are as
  // stored. Where the importer changed a tensor, it says so in `notes`: a MatMul's (in, out) matrix
  // transposed to nn.Linear's, a convolution's bias before a BatchNorm folded into the running mean,
  // a linear layer's columns after a channels-last flatten (Transpose (0, 2, 3, 1) -> Flatten, kiln's
  // export of AlexNet's) reordered from H,W,C to C,H,W as after torch.flatten.
  std::vector<NamedTensor> weights;
  // Each weight's kiln tensor ("layer1.0.conv1.weight"), by initializer name: the layers with
  // parameters are named after their initializers, so the two are mostly the same.
  std::map<std::string, std::string> kiln_tensor;
  std::map<std::string, std::string> metadata;  // the file's metadata_props
  // What the import decided that the user should know (a model with convolutions but no
  // BatchNormalization, as an eval-mode export leaves it; a bias folded; ...).
  std::vector<std::string> notes;
  // Of the file's bytes, lowercase hex; for a model keeping weights in data files beside it (the
  // dynamo exporter's <model>.onnx.data), of the file's digest and each data file's, together.
  std::string sha256;
  std::string path;
  int64_t opset = 0;
  std::string producer;  // "pytorch 2.5.0", "kiln 0.9.0", ...
};

// Reads the ONNX file at `path` into a Blueprint and its weights. kiln::Error naming the file (and
// the node, operator, attribute and the fix, where one is at fault) for a file that is missing,
// empty, damaged or truncated, cyclic or incomplete (a missing initializer), for each node kiln
// cannot train (all listed at once), and for a kiln built without the ONNX library
// (onnx_import_available()).
ImportedModel import_onnx(const std::string& path, const OnnxImportOptions& options = {});

// Whether this kiln was built with the ONNX library (Debian's libonnx-dev); import_onnx refuses otherwise.
bool onnx_import_available();

// Writes the imported weights into `exe`, a program compiled from model.blueprint, through
// load_torch_weights' checks (every tensor's shape, dtype and values checked, all problems listed,
// nothing written unless everything fits; options.new_head leaves the last linear layer as
// initialized). BN running statistics included.
TorchWeightsLoaded load_imported_weights(Executable& exe, const ImportedModel& model,
                                         const TorchWeightsOptions& options = {});

}  // namespace kiln
