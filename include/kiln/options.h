#pragma once
#include <string>

#include "kiln/dtype.h"

namespace kiln {

enum class OptimizerKind : uint8_t { SGD, AdamW };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::SGD;
  float momentum = 0.9f;  // SGD
  bool nesterov = false;  // SGD
  float weight_decay = 0.f;  // SGD: L2 added to the gradient (PyTorch); AdamW: decoupled
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // AdamW
};

OptimizerKind parse_optimizer(const std::string& text);  // throws kiln::Error

struct CompileOptions {
  Device device = Device::CPU;
  Precision precision = Precision::FP32;
  int batch = 32;
  Shape input_hwc;            // empty: take the blueprint's own input geometry
  bool fuse_cbr = true;       // fuse Conv -> BN -> ReLU into CBR
  float label_smoothing = 0.f;
  OptimizerConfig optimizer;
};

}  // namespace kiln
