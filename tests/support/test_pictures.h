#pragma once
// Synthetic pictures for the image tests: smooth gradients plus a little noise, so they compress
// like photos and crops, flips and resampling show (never flat).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace kiln::testing {

// w x h x c bytes, HWC; a different picture for each seed.
inline std::vector<uint8_t> picture(int w, int h, int c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const double fx = 2 + 6 * u(rng), fy = 2 + 6 * u(rng), phase = 6 * u(rng);
  std::vector<uint8_t> p(size_t(w) * h * c);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) {
        const double v = 127 + 90 * std::sin(fx * x / w + phase + k) * std::cos(fy * y / h + k) + 20 * (u(rng) - 0.5);
        p[(size_t(y) * w + x) * c + k] = uint8_t(std::clamp(v, 0.0, 255.0));
      }
  return p;
}

}  // namespace kiln::testing
