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
  int device_index = 0;  // which GPU (cudaSetDevice ordinal) when device is CUDA
  Precision precision = Precision::FP32;
  int batch = 32;
  Shape input_hwc;            // empty: take the blueprint's own input geometry
  bool fuse_cbr = true;       // fuse Conv -> BN -> ReLU into CBR
  // With a loss (the default) the program ends in softmax cross-entropy on labels. Without,
  // any blueprint compiles (a block, a backbone): its output is an Output tensor and backward
  // starts from `output_grad`, written by the caller.
  bool loss = true;
  // Also compute the gradient of the data input ("d:input"), as for a block inside a network;
  // by default layers reading the data batch skip it (first-layer backward).
  bool input_grad = false;
  float label_smoothing = 0.f;
  OptimizerConfig optimizer;
};

}  // namespace kiln
