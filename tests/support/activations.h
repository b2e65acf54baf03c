#pragma once
// The activations the tests loop over: every one the activation family lists
// (src/ops/activation/activation_list.def), so a new one is tested without editing a test.
#include <utility>
#include <vector>

#include "ops/activation/activation_functions.h"

namespace kiln::testing {

// Each activation with an alpha for it: 0 where it takes none; else PyTorch's default
// (`pytorch_default`) or 0.7, a value no default has, so an alpha that is dropped or swapped shows.
inline std::vector<std::pair<Activation, float>> every_activation(bool pytorch_default) {
  std::vector<std::pair<Activation, float>> all;
  for (const activation::Info& info : activation::kAll) {
    const float alpha = info.alpha == activation::AlphaRule::Unused ? 0.f : pytorch_default ? info.default_alpha : 0.7f;
    all.emplace_back(info.kind, alpha);
  }
  return all;
}

}  // namespace kiln::testing
