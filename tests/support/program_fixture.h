#pragma once
// Helpers for tests that drive compiled programs through the public API.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"

namespace kiln::testing {

// The 5,000 digits: KILN_DIGITS_DIR, else the shared copy beside the checkout, else the copy
// scripts/setup.sh makes in data/digits (a clone away from the shared folder has only that one).
// `root`: the repository root (GPU tests built elsewhere pass the one they run in).
inline std::string shared_digits_dir(const std::string& root = KILN_SOURCE_DIR) {
  if (const char* env = std::getenv("KILN_DIGITS_DIR"); env && *env) return env;
  for (const std::string& dir : {root + "/../shared/data/digits", root + "/data/digits"})
    if (std::filesystem::exists(dir + "/t10k-labels-idx1-ubyte")) return dir;
  return root + "/../shared/data/digits";  // absent: the loader's error names it and the fix
}

// The first `train` and `test` digits of the IDX folder `from` as an IDX folder at `to`: runs of a
// second or two.
inline void write_first_digits(const std::string& from, const std::string& to, uint32_t train, uint32_t test) {
  std::filesystem::create_directories(to);
  auto copy = [&](const std::string& name, uint32_t count, size_t header, size_t item) {
    const std::vector<uint8_t> all = read_bytes(from + "/" + name);
    ASSERT_GE(all.size(), header + count * item) << name;
    std::vector<uint8_t> part(all.begin(), all.begin() + std::ptrdiff_t(header + count * item));
    for (int i = 0; i < 4; ++i) part[4 + i] = uint8_t(count >> (8 * (3 - i)));  // the big-endian count
    write_bytes(to + "/" + name, part);
  };
  copy("train-images-idx3-ubyte", train, 16, 20 * 20);
  copy("train-labels-idx1-ubyte", train, 8, 1);
  copy("t10k-images-idx3-ubyte", test, 16, 20 * 20);
  copy("t10k-labels-idx1-ubyte", test, 8, 1);
}

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

// Every element of a float tensor (F32 or F64) as a double.
inline std::vector<double> host_values(const HostTensor& t) {
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = value(t, i);
  return v;
}

// rel_l2 (support/cpu_test_util.h) of two tensors.
inline double rel_l2(const HostTensor& a, const HostTensor& b) { return rel_l2(host_values(a), host_values(b)); }

}  // namespace kiln::testing
