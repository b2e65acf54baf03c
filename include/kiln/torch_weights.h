#pragma once
// PyTorch weights into a compiled program: a state_dict saved as safetensors (tools/
// torch_to_safetensors.py, or safetensors.torch.save_file(model.state_dict(), path)) — torchvision's
// ResNet and VGG-BN weights for the zoo models, or any model whose Blueprint names its layers as
// the PyTorch modules are named. Layouts are converted (convolution weights OIHW → kiln's KRSC; the
// first linear layer after a flatten of a feature map has its columns reordered from PyTorch's
// C,H,W flatten to kiln's H,W,C), BN running statistics included.
#include <map>
#include <string>
#include <vector>

#include "kiln/executable.h"

namespace kiln {

// The name each of the program's parameters and BN statistics has in PyTorch's state_dict of the
// same model. Layers named as PyTorch modules keep their names. A Blueprint::cbr composite (tensors
// "<name>.conv.*", "<name>.bn.*") maps as torchvision writes its models: "…convN" to "…convN" and
// "…bnN" (ResNet's conv1/bn1, layer1.0.conv2/bn2), and "features.K" inside a sequence to the
// sequence's PyTorch indices (VGG: conv, BN and ReLU are three modules, a pool one).
std::map<std::string, std::string> torch_names(const Program& program);

struct TorchWeightsOptions {
  // Leave the last linear layer (weight and bias) as initialized, for fine-tuning with another
  // number of classes; the file's may then have any shape or be absent.
  bool new_head = false;
};

struct TorchWeightsLoaded {
  int tensors = 0;                    // kiln tensors written
  std::vector<std::string> left_out;  // the file's tensors not used: the old head (new_head)
  // BatchNorm's num_batches_tracked counters of the file, not used (one per BatchNorm in a PyTorch
  // state_dict: kiln's BN momentum is fixed).
  std::vector<std::string> bn_counters;
  // What the file is when it is a checkpoint kiln train wrote: "a kiln checkpoint of digits_cnn
  // after 3 epochs" (its weights and BN statistics load, its optimizer state and epoch do not: the
  // new run starts from the weights). Empty for a PyTorch state_dict.
  std::string kiln_checkpoint;
};

// Writes every parameter and BN running statistic of `exe` from the file, or nothing. The file is a
// PyTorch state_dict, or a checkpoint kiln train wrote (recognized by its metadata 'format'), whose
// tensors have kiln's names and layouts already. A kiln::Error says what the file is (a kiln
// checkpoint of another model, naming it; the state_dict of a ResNet or VGG; ...) and
// lists each tensor missing from the file, each shape that does not fit, each tensor of the file
// that this model has no place for, each tensor whose dtype is not floating point (naming it),
// and each non-finite value, before anything is written. F32, F16, BF16 and F64 tensors load
// (fp16 and bf16 exactly, F64 rounded to float32; one past float32's range is refused).
// BatchNorm's num_batches_tracked counters, of any dtype (int64 in PyTorch's state_dicts), are
// left out: kiln's BN momentum is fixed, so they have no use.
TorchWeightsLoaded load_torch_weights(Executable& exe, const std::string& path, const TorchWeightsOptions& options = {});

}  // namespace kiln
