#pragma once
// Helpers for tests that drive compiled programs through the public API.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"

namespace kiln::testing {

inline std::string shared_digits_dir() { return std::string(KILN_SOURCE_DIR) + "/../shared/data/digits"; }

// Fills a float tensor (F32 or F64) with values from N(0, 1).
inline void fill_normal(HostTensor t, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> dist(0.0, scale);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.spec->dtype == DType::F64) t.as<double>()[i] = dist(rng);
    else t.as<float>()[i] = float(dist(rng));
  }
}

inline void fill_labels(HostTensor t, int classes, std::mt19937& rng) {
  std::uniform_int_distribution<int> dist(0, classes - 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<int32_t>()[i] = dist(rng);
}

inline double value(const HostTensor& t, int64_t i) {
  return t.spec->dtype == DType::F64 ? t.as<double>()[i] : double(t.as<float>()[i]);
}

inline double loss_of(Executable& exe) { return value(exe.tensor(exe.program().loss), 0); }

// Relative L2 error ||a - b|| / max(||b||, tiny) over two tensors of the same size.
inline double rel_l2(const HostTensor& a, const HostTensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = value(a, i) - value(b, i);
    num += d * d;
    den += value(b, i) * value(b, i);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace kiln::testing
