#pragma once
// The conv_bn_act tests' network (src/ops/conv_bn_act/conv_bn_act_test.cpp and its GPU half): the
// windows the CBR does not run, each Conv -> BatchNorm -> activation, compiled with fusion and with
// --no-fuse, one training step and one inference from the same weights and batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ir/fused_layer_kinds.h"
#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "support/imported_model_step.h"

namespace kiln::testing::conv_bn_act {

constexpr int kBatch = 3, kSide = 9, kChannels = 8;

inline ConvAttrs window(int out, int kh, int kw, int sh, int sw, int pt, int pl, int pb, int pr, int dil, int groups) {
  ConvAttrs a;
  a.out_channels = out, a.kernel_h = kh, a.kernel_w = kw, a.stride_h = sh, a.stride_w = sw;
  a.pad_top = pt, a.pad_left = pl, a.pad_bottom = pb, a.pad_right = pr;
  a.dilation_h = a.dilation_w = dil, a.groups = groups;
  return a;
}

// A stem, then the windows the CBR does not run, each Conv -> BatchNorm -> activation: depthwise
// with a stride, grouped 1x1, dilated, rectangular with its own strides and asymmetric padding. The
// depthwise layer's output feeds a squeeze-and-excitation block, as MobileNetV3's and
// EfficientNet's do, whose pool's gradient the fused backward takes in (conv_bn_act_layer.cpp).
inline Blueprint network(const std::function<void(Blueprint&)>& act) {
  Blueprint b("conv_bn_act_test");
  b.input(kSide, kSide, 3);
  b.conv(kChannels, 3, 1, 1, false, "stem").bn("stem_bn");
  act(b);
  b.conv(window(kChannels, 3, 3, 2, 2, 1, 1, 1, 1, 1, kChannels), "dw").bn("dw_bn");
  act(b);
  const Blueprint::Ref features = b.last();
  b.adaptive_avgpool(1, 1, "se_pool").conv(4, 1, 1, 0, true, "se_fc1").relu("se_relu");
  b.conv(kChannels, 1, 1, 0, true, "se_fc2").sigmoid("se_gate");
  b.mul(features, b.last(), "se");
  b.conv(window(16, 1, 1, 1, 1, 0, 0, 0, 0, 1, 2), "grouped").bn("grouped_bn");
  act(b);
  b.conv(window(16, 3, 3, 1, 1, 2, 2, 2, 2, 2, 4), "dilated").bn("dilated_bn");
  act(b);
  b.conv(window(12, 1, 3, 1, 2, 0, 1, 0, 2, 1, 1), "rect").bn("rect_bn");
  act(b);
  b.global_avgpool("pool").flatten("flat").fc(5, true, "fc");
  return b;
}

struct NetworkRun {
  Step step;
  std::vector<double> inference, running_var;
  int fused_layers = 0;
};

inline NetworkRun run(const Blueprint& bp, bool fuse, Precision precision, Device device = Device::CPU) {
  CompileOptions o;
  o.device = device, o.batch = kBatch, o.precision = precision, o.fuse_cbr = fuse;
  o.cuda.conv_tf32 = false;  // fp32 products on the GPU, as on the CPU
  o.input_hwc = {kSide, kSide, 3};
  Program program = compile(bp, o);
  NetworkRun r;
  r.fused_layers = program.graph.count(fused_layer::ConvBnAct);
  Executable exe(std::move(program), 3);
  // Random BatchNorm parameters, so that every activation sees both sides of its bends.
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0, 1);
  const Program& p = exe.program();
  for (int id : p.params) {
    const std::string& name = p.tensors[size_t(id)].name;
    if (name.find("_bn.") == std::string::npos) continue;
    std::vector<double> v(size_t(numel(p.tensors[size_t(id)].shape)));
    for (double& x : v) x = name.ends_with(".weight") ? 1 + 0.5 * normal(rng) : 0.5 * normal(rng);
    write_values(exe, id, v);
  }
  std::vector<float> x(size_t(kBatch * kSide * kSide * 3));
  std::mt19937 data(11);
  for (float& v : x) v = float(normal(data));
  r.step = training_step(exe, x, {0, 3, 4});
  for (int id : p.buffers)
    if (p.tensors[size_t(id)].name == "dilated_bn.running_var") r.running_var = float_values(exe, id);
  write_values(exe, p.input, std::vector<double>(x.begin(), x.end()));  // the inference reads the same batch
  exe.run_inference({});
  r.inference = float_values(exe, p.inference_logits);
  return r;
}

struct Gaps {
  StepGap step;
  double inference, running_var;
};
inline Gaps gaps(const NetworkRun& fused, const NetworkRun& unfused) {
  return {step_gap(fused.step, unfused.step), relative_gap(fused.inference, unfused.inference),
          relative_gap(fused.running_var, unfused.running_var)};
}

inline void expect_within(const Gaps& g, double bound, const std::string& what) {
  std::printf("%s: logits %.2e, loss %.2e, worst gradient %.2e (%s), inference %.2e, running_var %.2e\n",
              what.c_str(), g.step.logits, g.step.loss, g.step.worst_gradient, g.step.worst_name.c_str(), g.inference,
              g.running_var);
  EXPECT_TRUE(g.step.missing.empty()) << what << ": parameters on one side only";
  EXPECT_LE(g.step.logits, bound) << what;
  EXPECT_LE(g.step.loss, bound) << what;
  EXPECT_LE(g.step.worst_gradient, bound) << what << ": gradient of " << g.step.worst_name;
  EXPECT_LE(g.inference, bound) << what << ": inference";
  EXPECT_LE(g.running_var, bound) << what << ": running_var";
}

struct ActivationCase {
  std::string name;
  std::function<void(Blueprint&)> add;
};

inline std::vector<ActivationCase> activations() {
  return {{"relu", [](Blueprint& b) { b.relu(); }},
          {"relu6", [](Blueprint& b) { b.relu6(); }},
          {"silu", [](Blueprint& b) { b.silu(); }},
          {"hardswish", [](Blueprint& b) { b.hardswish(); }},
          {"gelu", [](Blueprint& b) { b.gelu(); }},
          {"gelu_tanh", [](Blueprint& b) { b.gelu(true); }},
          {"leaky_relu", [](Blueprint& b) { b.leaky_relu(0.2f); }},
          {"elu", [](Blueprint& b) { b.elu(0.7f); }},
          {"sigmoid", [](Blueprint& b) { b.sigmoid(); }},
          {"hardsigmoid", [](Blueprint& b) { b.hardsigmoid(); }},
          {"tanh", [](Blueprint& b) { b.tanh(); }}};
}

}  // namespace kiln::testing::conv_bn_act
