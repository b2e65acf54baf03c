#pragma once
// What the export tests share: kiln's own eval-mode logits for an NCHW batch, the BatchNorm
// statistics and affine parameters set away from their defaults, and onnxruntime's logits for an
// exported file, through the CPU suite's Python (KILN_PYTHON, third_party/pyenv) running
// tests/export/run_onnx.py.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "support/random_batch_norms.h"
#include "support/zoo_test_side.h"
#include "support/temp_dir.h"

namespace kiln::testing {


inline std::vector<float> normal_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// kiln's inference logits (eval mode) for the NCHW batch `nchw` of shape `s`.
inline std::vector<float> kiln_logits(Executable& exe, const std::vector<float>& nchw, const Shape& s) {
  const std::vector<float> nhwc = nhwc_of(nchw, s);
  exe.write(exe.program().input, nhwc.data(), nhwc.size() * sizeof(float));
  exe.run_inference({});
  return exe.read<float>(exe.program().inference_logits);
}

// randomize_batch_norms (support/random_batch_norms.h) from a seed of its own.
inline void randomize_batch_norms(Executable& exe, uint32_t seed) {
  std::mt19937 rng(seed);
  testing::randomize_batch_norms(exe, rng);
}

// Running statistics near what each BatchNorm sees for the batch `nchw`, then moved at random:
// with statistics drawn without regard to the layers' scale (randomize_batch_norms), a deep
// network in eval mode answers almost alike for any input, which would hide a wrong weight
// (MobileNetV2's depthwise layers, at torchvision's init, shrink their input by about
// sqrt(2 / channels): its logits moved by under 1e-3 for another input). One training-mode
// forward gives every BatchNorm its batch mean and variance; each running mean becomes that mean
// moved by U(-0.3, 0.3) standard deviations, each running variance that variance times
// U(0.7, 1.4), so the statistics still matter and a misread one still shows.
inline void calibrate_batch_norms(Executable& exe, const std::vector<float>& nchw, const Shape& s, uint32_t seed) {
  const Program& p = exe.program();
  const std::vector<float> nhwc = nhwc_of(nchw, s);
  exe.write(p.input, nhwc.data(), nhwc.size() * sizeof(float));
  if (p.label >= 0) {
    const std::vector<int32_t> labels(size_t(p.tensors[size_t(p.label)].shape[0]), 0);
    exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
  }
  exe.run_forward({});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> shift(-0.3f, 0.3f), factor(0.7f, 1.4f);
  for (const Layer& l : p.graph.layers) {
    const std::string bn = l.kind == LayerKind::BatchNorm ? l.name : l.bn_name;
    const BatchNormAttrs* attrs = l.attrs.find<BatchNormAttrs>();
    if (bn.empty() || !attrs || p.find(l.name + ":saved_mean") < 0) continue;
    std::vector<float> mean = exe.read<float>(p.find(l.name + ":saved_mean"));
    const std::vector<float> inv_std = exe.read<float>(p.find(l.name + ":saved_inv_std"));
    std::vector<float> var(mean.size());
    for (size_t c = 0; c < mean.size(); ++c) {
      const float batch_var = std::max(1.f / (inv_std[c] * inv_std[c]) - float(attrs->eps), 0.f);
      mean[c] += shift(rng) * std::sqrt(batch_var);
      var[c] = batch_var * factor(rng);
    }
    exe.write(exe.id(bn + ".running_mean"), mean.data(), mean.size() * sizeof(float));
    exe.write(exe.id(bn + ".running_var"), var.data(), var.size() * sizeof(float));
  }
}

// One model run in onnxruntime: the file, its input (NCHW), optionally a deliberate corruption
// (run_onnx.py's "tamper"); after run_onnx, the logits and the report on the file.
struct OnnxRun {
  std::string model;
  std::vector<float> input;
  Shape shape;
  nlohmann::json tamper;  // null: the file as written
  std::vector<float> logits;
  nlohmann::json report;
};

inline std::string python() {
  if (!std::filesystem::exists(KILN_PYTHON))
    ADD_FAILURE() << KILN_PYTHON << " is missing: the ONNX export tests run onnxruntime in the CPU suite's Python; "
                     "run scripts/setup.sh (it makes third_party/pyenv)";
  return KILN_PYTHON;
}

// Runs every run's model in one Python process (files in `dir`); fails the test when it cannot.
inline void run_onnx(std::vector<OnnxRun>& runs, const std::filesystem::path& dir) {
  const std::string py = python();
  if (::testing::Test::HasFailure()) return;
  nlohmann::json job;
  job["runs"] = nlohmann::json::array();
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string in = (dir / fmt::format("run{}.in.f32", i)).string();
    std::ofstream(in, std::ios::binary)
        .write(reinterpret_cast<const char*>(runs[i].input.data()), std::streamsize(runs[i].input.size() * 4));
    job["runs"].push_back({{"model", runs[i].model},
                           {"input", in},
                           {"shape", runs[i].shape},
                           {"output", (dir / fmt::format("run{}.out.f32", i)).string()},
                           {"tamper", runs[i].tamper}});
  }
  const std::string job_file = (dir / "job.json").string(), report = (dir / "report.json").string(),
                    errors = (dir / "errors.txt").string();
  std::ofstream(job_file) << job.dump();
  const std::string cmd = fmt::format("'{}' '{}/tests/export/run_onnx.py' '{}' > '{}' 2> '{}'", py, KILN_SOURCE_DIR,
                                      job_file, report, errors);
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << cmd << " failed:\n" << read_text(errors);
    return;
  }
  const nlohmann::json reports = nlohmann::json::parse(read_text(report), nullptr, false);
  if (!reports.is_object() || reports["runs"].size() != runs.size()) {
    ADD_FAILURE() << "run_onnx.py wrote no report for each run:\n" << read_text(report);
    return;
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::vector<uint8_t> bytes = read_bytes(job["runs"][i]["output"].get<std::string>());
    runs[i].logits.resize(bytes.size() / 4);
    std::memcpy(runs[i].logits.data(), bytes.data(), runs[i].logits.size() * 4);
    runs[i].report = reports["runs"][i];
  }
}

// max |a - b| / max |b|, or infinity when the sizes differ: how far a is from the reference b, on
// the scale of its largest logit.
inline double logit_gap(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || b.empty()) return INFINITY;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i]))), scale = std::max(scale, std::abs(double(b[i])));
  return worst / std::max(scale, 1e-30);
}

}  // namespace kiln::testing
