#pragma once
// What the tests of models PyTorch exported to ONNX need (tests/gpu/onnx_timm_export_gpu_test.cpp;
// onnx_torch_export_gpu_test.cpp has its own copies of the same functions, for now): an imported
// model's eval-mode logits, one float64 training step of a compiled program (logits, loss, every
// parameter's gradient by its PyTorch name), and the gap between two such steps.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/onnx_import.h"
#include "kiln/torch_weights.h"

namespace kiln::testing {

// The largest difference relative to the largest value of `want` (1e9 when the sizes differ or
// `want` is all zero: a failure whatever the bound).
inline double relative_gap(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i])), scale = std::max(scale, std::abs(want[i]));
  return got.size() == want.size() && scale > 0 ? worst / scale : 1e9;
}

inline std::vector<double> as_doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// The imported model's eval-mode logits for `batch` samples `nhwc`, fp32 on `device`.
inline std::vector<double> inference_logits(const ImportedModel& m, Device device, const std::vector<float>& nhwc,
                                            int batch) {
  CompileOptions o;
  o.device = device, o.batch = batch;
  Executable exe(compile(m.blueprint, o), 1);
  load_imported_weights(exe, m);
  exe.write(exe.program().input, nhwc.data(), nhwc.size() * sizeof(float));
  exe.run_inference({});
  return as_doubles(exe.read<float>(exe.program().inference_logits));
}

// Parameter -> values, by the parameter's PyTorch name (kiln::torch_names; kiln's own name where
// it has none).
using Gradients = std::map<std::string, std::vector<double>>;

// Every parameter of `exe`, by its PyTorch name, in kiln's layouts: its gradients after a backward
// pass (Executable::gradient) or, `values`, the parameters themselves.
inline Gradients parameters_by_torch_name(Executable& exe, bool values = false) {
  const Program& p = exe.program();
  const std::map<std::string, std::string> names = torch_names(p);
  Gradients out;
  for (int param : p.params) {
    const std::string& kiln_name = p.tensors[size_t(param)].name;
    const auto it = names.find(kiln_name);
    out[it == names.end() ? kiln_name : it->second] = values ? exe.read<double>(param) : exe.gradient(kiln_name);
  }
  return out;
}

// One float64 training step of `exe` (weights loaded) on `nhwc` with `labels`: its logits and
// loss, and each trainable parameter's gradient by its PyTorch name.
struct Step {
  std::vector<double> logits;
  double loss = 0;
  Gradients grads;
};

// Tensor `id` of an F32 or F64 program, widened to double (torch_training_reference.h's
// read_values also reads F16 and BF16, but needs the CUDA test support).
inline std::vector<double> float_values(Executable& exe, int id) {
  if (exe.program().tensors[size_t(id)].dtype == DType::F64) return exe.read<double>(id);
  const std::vector<float> v = exe.read<float>(id);
  return {v.begin(), v.end()};
}

// Writes `values` into tensor `id` of an F32 or F64 program, in its dtype.
inline void write_values(Executable& exe, int id, const std::vector<double>& values) {
  if (exe.program().tensors[size_t(id)].dtype == DType::F64) {
    exe.write(id, values.data(), values.size() * sizeof(double));
  } else {
    const std::vector<float> v(values.begin(), values.end());
    exe.write(id, v.data(), v.size() * sizeof(float));
  }
}

// One training step (forward and backward, no update) of `exe` (weights loaded) on `nhwc` with
// `labels`, read after the backward pass, as a user reads a step's outputs: the logits are
// persistent (memory_plan_test's LogitsThatViewAnActivationAreReadableAfterTheStep; timm's
// resnetv2_18 ends in a flatten viewing its 1x1 conv head, whose storage the backward reused before
// 1aa272a). Float64 programs read float64 batches, fp32 programs float ones.
inline Step training_step(Executable& exe, const std::vector<float>& nhwc, const std::vector<int32_t>& labels) {
  const Program& p = exe.program();
  write_values(exe, p.input, std::vector<double>(nhwc.begin(), nhwc.end()));
  exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
  exe.run_forward({0.f, 0, 1});
  exe.run_backward({0.f, 0, 1});
  Step s;
  s.logits = float_values(exe, p.logits);
  s.loss = float_values(exe, p.loss).at(0);
  s.grads = parameters_by_torch_name(exe);
  return s;
}

// How far step `got` is from `want`: the logits' largest gap relative to the largest logit, the
// loss's relative gap, and each gradient's largest difference relative to the largest gradient of
// all (a BatchNorm bias whose shift the next BatchNorm takes away has gradients of rounding size
// only, efficientnet_b0's features.6.1.block.3.1.bias), with the parameter where it is largest; a
// parameter on one side only (or of another size) is listed in `missing`.
struct StepGap {
  double logits = 0, loss = 0, worst_gradient = 0;
  std::string worst_name;
  std::vector<std::string> missing;
};

inline StepGap step_gap(const Step& got, const Step& want) {
  StepGap gap;
  gap.logits = relative_gap(got.logits, want.logits);
  gap.loss = std::abs(got.loss - want.loss) / std::max(std::abs(want.loss), 1e-300);
  double largest = 0;
  for (const auto& [name, g] : want.grads)
    for (double v : g) largest = std::max(largest, std::abs(v));
  for (const auto& [name, g] : want.grads) {
    const auto it = got.grads.find(name);
    if (it == got.grads.end() || it->second.size() != g.size()) {
      gap.missing.push_back(name);
      continue;
    }
    for (size_t i = 0; i < g.size(); ++i)
      if (std::abs(it->second[i] - g[i]) > gap.worst_gradient)
        gap.worst_gradient = std::abs(it->second[i] - g[i]), gap.worst_name = name;
  }
  for (const auto& [name, g] : got.grads)
    if (!want.grads.contains(name)) gap.missing.push_back(name);
  gap.worst_gradient /= std::max(largest, 1e-300);
  return gap;
}

// A mistake an importer could make, for the tests showing their bounds catch one: an fp32 OIHW
// convolution weight with its input channels reversed (a layout misread scrambles it alike).
inline void reverse_input_channels(NamedTensor& conv) {
  const int64_t O = conv.shape[0], I = conv.shape[1], K = conv.shape[2] * conv.shape[3];
  std::vector<float> w(size_t(O * I * K)), reversed(w.size());
  std::memcpy(w.data(), conv.data.data(), conv.data.size());
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t k = 0; k < K; ++k) reversed[size_t((o * I + i) * K + k)] = w[size_t((o * I + (I - 1 - i)) * K + k)];
  std::memcpy(conv.data.data(), reversed.data(), conv.data.size());
}

}  // namespace kiln::testing
