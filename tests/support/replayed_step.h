#pragma once
// The GPU families' check that a training step replayed from a CUDA Graph recomputes everything:
// steps at learning rate 0 on batches A, B and A again, the third replayed from the graph the
// second captured, must give A's gradients, not B's. A replay that skipped or froze a layer, or
// summed its parameter gradients into stale partials, would give B's (or neither).
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "support/cbr_block.h"
#include "support/cpu_test_util.h"

namespace kiln::testing {

struct ReplayedStep {
  double replay;       // relative L2 of the third step's gradients against the first's
  double other_batch;  // of the second step's (batch B) against the first's
};

// `model` compiled for CUDA in `precision` at batch 4 (labels 0..3), the gradients of `params`.
inline ReplayedStep replayed_step(const Blueprint& model, Precision precision, const std::vector<std::string>& params,
                                  uint32_t seed) {
  CompileOptions o;
  o.device = Device::CUDA, o.precision = precision, o.batch = 4;
  // No dynamic loss scale: an overflow at its first scale (2^16) halves it in the first step's
  // update, and Executable::gradient, read after run_step, would then divide that step's gradients
  // by the new scale (twice them: LayerNormGpu's fp16 case measured 0.5 on the H100 at e87613e).
  o.loss_scaling.mode = LossScaleMode::Off;
  Executable exe(compile(model, o), 5);
  const Program& p = exe.program();
  std::mt19937 rng(seed);
  const size_t n = size_t(numel(p.tensors[size_t(p.input)].shape));
  const std::vector<std::vector<float>> batches = {random_values<float>(DType::F32, n, rng),
                                                   random_values<float>(DType::F32, n, rng)};
  const std::vector<int32_t> labels = {0, 1, 2, 3};
  std::vector<std::vector<double>> grads;
  for (int step = 0; step < 3; ++step) {
    write_floats(exe, p.input, batches[size_t(step % 2)]);
    exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
    exe.run_step({0.f, step, 1});
    std::vector<double> g;
    for (const std::string& param : params) {
      const std::vector<double> part = exe.gradient(param);
      g.insert(g.end(), part.begin(), part.end());
    }
    grads.push_back(std::move(g));
  }
  return {rel_l2(grads[2], grads[0]), rel_l2(grads[1], grads[0])};
}

}  // namespace kiln::testing
