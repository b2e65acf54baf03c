#pragma once
// An op bench for LARS_UPDATE (LarsUpdate in optimizer_contract.h): an F64 parameter region, its
// gradient and momentum regions, and one view per parameter tensor laid out in the region as a
// compiled program lays them out (each from a multiple of 8 elements, with a gap after it).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/optimizer/lars_segment.h"
#include "ops/optimizer/optimizer_contract.h"
#include "support/cpu_test_util.h"
#include "support/op_bench.h"

namespace kiln::testing {

struct NamedShape {
  std::string name;
  Shape shape;
};

class LarsBench {
 public:
  static constexpr double kGap = 7;  // the gaps' parameters and gradients: the update must leave them
  OpBench b;
  int params = -1, grads = -1, momentum = -1;
  std::vector<int> views;
  int64_t n = 0;  // elements of each region

  explicit LarsBench(const std::vector<NamedShape>& tensors) {
    std::vector<int64_t> offsets;
    for (const NamedShape& t : tensors) {
      offsets.push_back(n);
      n += (numel(t.shape) + 7) / 8 * 8 + 8;
    }
    params = b.add("params", {n}, DType::F64);
    grads = b.add("grads", {n}, DType::F64);
    momentum = b.add("optimizer.lars_momentum_buffer", {n}, DType::F64);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const int id = b.add(tensors[i].name, tensors[i].shape, DType::F64);
      b.program.tensors[size_t(id)].alias_of = params;
      b.program.tensors[size_t(id)].alias_offset = size_t(offsets[i]) * sizeof(double);
      views.push_back(id);
    }
  }

  // The op over the bench's regions and views, with the contract's default attributes.
  LarsUpdate<TensorId> op() const {
    LarsUpdate<TensorId> lars;
    lars.grads = grads, lars.params = params, lars.momentum_buffer = momentum;
    lars.tensors.assign(views.begin(), views.end());
    return lars;
  }

  // The views' element ranges, written out from their specs: plain where skip_1d and 1-D.
  std::vector<LarsSegment> segments(bool skip_1d) const {
    std::vector<LarsSegment> out;
    for (int id : views) {
      const TensorSpec& t = b.program.tensors[size_t(id)];
      out.push_back({int64_t(t.alias_offset / sizeof(double)), numel(t.shape), skip_1d && t.shape.size() == 1});
    }
    return out;
  }

  // Uniform values in [-1, 1) in every tensor (zeros in tensor `zero`, if any), kGap in the gaps,
  // written to `region` and returned.
  std::vector<double> fill_random(int region, std::mt19937& rng, size_t zero = size_t(-1)) {
    std::vector<double> v(size_t(n), kGap);
    const std::vector<LarsSegment> segs = segments(false);
    for (size_t s = 0; s < segs.size(); ++s) {
      const std::vector<double> values = uniform_vec(rng, size_t(segs[s].length));
      for (int64_t i = 0; i < segs[s].length; ++i) v[size_t(segs[s].offset + i)] = s == zero ? 0.0 : values[size_t(i)];
    }
    b.fill(region, v);
    return v;
  }
  std::vector<double> random_params(std::mt19937& rng) { return fill_random(params, rng); }
  std::vector<double> random_grads(std::mt19937& rng, size_t zero = size_t(-1)) {
    return fill_random(grads, rng, zero);
  }

  // Parameters and momentum in the gaps as they started.
  void expect_gaps_untouched() {
    const std::vector<double> p = b.values(params), m = b.values(momentum);
    std::vector<bool> covered(size_t(n), false);
    for (const LarsSegment& s : segments(false))
      for (int64_t i = s.offset; i < s.offset + s.length; ++i) covered[size_t(i)] = true;
    for (int64_t i = 0; i < n; ++i)
      if (!covered[size_t(i)]) {
        ASSERT_EQ(p[size_t(i)], kGap) << "parameter gap element " << i;
        ASSERT_EQ(m[size_t(i)], 0.0) << "momentum gap element " << i;
      }
  }
};

}  // namespace kiln::testing
