#pragma once
// The key of a layer's random stream (dropout, stochastic depth): FNV-1a over its name, 32 bits,
// exact as an op attribute. A name, not a position, so a layer draws the same masks in fused and
// unfused programs and wherever it sits; cpu::dropout_stream mixes it with the step.
#include <cstdint>
#include <string>

namespace kiln {

inline uint32_t layer_key(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  return h;
}

}  // namespace kiln
