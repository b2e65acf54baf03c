#pragma once
// Every BatchNorm's running statistics and affine parameters drawn as the torchvision reference
// draws them (bench/torch_torchvision_reference.py), so that BN in eval mode is far from the
// identity and a wrong statistic, epsilon or folding shows.
#include <random>
#include <string>
#include <vector>

#include "kiln/executable.h"

namespace kiln::testing {

inline void randomize_batch_norms(Executable& exe, std::mt19937& rng) {
  auto fill = [&](const std::string& name, float lo, float hi) {
    const int id = exe.id(name);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(size_t(numel(exe.program().tensors[id].shape)));
    for (float& x : v) x = u(rng);
    exe.write(id, v.data(), v.size() * sizeof(float));
  };
  for (const Layer& l : exe.program().graph.layers) {
    const std::string bn = l.kind == LayerKind::BatchNorm ? l.name : l.bn_name;
    if (bn.empty()) continue;
    fill(bn + ".running_mean", -0.5f, 0.5f);
    fill(bn + ".running_var", 0.5f, 2.0f);
    fill(bn + ".weight", 0.5f, 1.5f);
    fill(bn + ".bias", -0.5f, 0.5f);
  }
}

}  // namespace kiln::testing
