#pragma once
// How the loss scale changes after a step, once for the CPU and the CUDA kernel (the CUDA one runs
// it in one thread, on the device). PyTorch's rule (torch._amp_update_scale_): a step with inf/NaN
// gradients multiplies the scale by the backoff factor and restarts the count; a clean step counts,
// and the growth_interval-th one in a row multiplies the scale by the growth factor (kept only
// while it stays finite) and restarts the count.
#include <cfloat>
#include <cstdint>

#include "core/host_device.h"

namespace kiln::loss_scale {

struct Rule {
  float growth_factor = 2.f, backoff_factor = 0.5f;
  int32_t growth_interval = 2000;
};

KILN_HOST_DEVICE inline void update(bool found_nonfinite, float& scale, int32_t& clean_steps, const Rule& rule) {
  if (found_nonfinite) {
    scale *= rule.backoff_factor;
    clean_steps = 0;
    return;
  }
  const int32_t clean = clean_steps + 1;
  if (clean >= rule.growth_interval) {  // ">=": a count resumed under a shorter interval still grows
    const float grown = scale * rule.growth_factor;
    if (grown <= FLT_MAX) scale = grown;  // false for inf (and NaN)
    clean_steps = 0;
  } else {
    clean_steps = clean;
  }
}

}  // namespace kiln::loss_scale
