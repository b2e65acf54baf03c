// Data parallel: the plan of which gradients are averaged over the ranks together, and after which
// backward op. Every gradient byte must be averaged exactly once, no bucket may start before the
// last op that writes into it, and the buckets start in the order the backward finishes them.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "kiln/compile.h"
#include "runtime/gradient_buckets.h"

namespace kiln {
namespace {

Blueprint three_layers() {
  Blueprint m("three");
  m.input(8, 8, 3);
  m.cbr(16, 3, 1, 1, "conv1").cbr(32, 3, 2, 1, "conv2").global_avgpool("pool").flatten("flatten").fc(10, true, "fc");
  return m;
}

Program compiled(Device device, Precision precision) {
  CompileOptions o;
  o.device = device, o.precision = precision, o.batch = 4;
  return compile(three_layers(), o);
}

// Where a tensor lies: its storage's owner and byte range, walked here independently of the plan.
std::pair<int, std::pair<size_t, size_t>> extent(const Program& p, int id) {
  size_t begin = 0;
  const size_t bytes = p.tensors[size_t(id)].bytes();
  while (p.tensors[size_t(id)].alias_of >= 0) begin += p.tensors[size_t(id)].alias_offset, id = p.tensors[size_t(id)].alias_of;
  return {id, {begin, begin + bytes}};
}

// The last backward op whose outputs overlap `grad`, found by scanning every op's outputs.
int last_writer(const Program& p, int grad) {
  const auto g = extent(p, grad);
  int last = -1;
  for (size_t k = 0; k < p.backward.size(); ++k)
    for (int out : p.backward[k].out) {
      if (out < 0) continue;
      const auto o = extent(p, out);
      if (o.first == g.first && o.second.first < g.second.second && g.second.first < o.second.second) last = int(k);
    }
  return last;
}

void expect_every_gradient_byte_once(const Program& p, const std::vector<GradientBucket>& buckets) {
  std::map<int, std::vector<std::pair<size_t, size_t>>> covered;  // region -> [begin, end)
  std::set<int> grads;
  for (const GradientBucket& b : buckets) {
    covered[b.region].push_back({b.offset, b.offset + b.count * dtype_size(b.dtype)});
    EXPECT_EQ(b.dtype, p.tensors[size_t(b.region)].dtype);
    for (int g : b.grads) {
      EXPECT_TRUE(grads.insert(g).second) << p.tensors[size_t(g)].name << " is in two buckets";
      const auto e = extent(p, g);
      EXPECT_EQ(e.first, b.region);
      EXPECT_GE(e.second.first, b.offset) << p.tensors[size_t(g)].name;
      EXPECT_LE(e.second.second, b.offset + b.count * dtype_size(b.dtype)) << p.tensors[size_t(g)].name;
      EXPECT_GE(b.ready_after, last_writer(p, g)) << p.tensors[size_t(g)].name << " is averaged before it is written";
    }
  }
  EXPECT_EQ(grads.size(), p.grads.size());
  for (auto& [region, ranges] : covered) {
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      EXPECT_EQ(ranges[i].first, ranges[i - 1].second) << "a gap or an overlap between buckets of a region";
  }
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_LE(buckets[i - 1].ready_after, buckets[i].ready_after);
}

TEST(GradientBuckets, OneBucketPerGradientStartsRightAfterItsLastWriter) {
  const Program p = compiled(Device::CPU, Precision::FP32);
  const std::vector<GradientBucket> buckets = plan_gradient_buckets(p, 1);
  ASSERT_EQ(buckets.size(), p.grads.size());
  expect_every_gradient_byte_once(p, buckets);
  for (const GradientBucket& b : buckets) {
    ASSERT_EQ(b.grads.size(), 1u);
    EXPECT_EQ(b.ready_after, last_writer(p, b.grads[0])) << p.tensors[size_t(b.grads[0])].name;
  }
  // The backward ends with the first layer: the classifier's gradients go first, conv1's last.
  EXPECT_NE(p.tensors[size_t(buckets.front().grads[0])].name.find("fc"), std::string::npos);
  EXPECT_NE(p.tensors[size_t(buckets.back().grads[0])].name.find("conv1"), std::string::npos);
  EXPECT_LT(buckets.front().ready_after, buckets.back().ready_after);
}

TEST(GradientBuckets, ALargeBucketHoldsARegionReadyAfterItsLastWriter) {
  const Program p = compiled(Device::CPU, Precision::FP32);
  const std::vector<GradientBucket> buckets = plan_gradient_buckets(p, size_t(1) << 30);
  ASSERT_EQ(buckets.size(), 1u);
  expect_every_gradient_byte_once(p, buckets);
  int last = -1;
  for (int g : p.grads) last = std::max(last, last_writer(p, g));
  EXPECT_EQ(buckets[0].ready_after, last);
}

TEST(GradientBuckets, BucketsReachTheirSizeAndMixedPrecisionKeepsItsTwoRegions) {
  // On the GPU in fp16 the convolution and GEMM weights' gradients are fp16 (compute_grad_region),
  // BatchNorm's and the biases' fp32 (grad_region): two regions, never one bucket across both.
  const Program p = compiled(Device::CUDA, Precision::FP16);
  ASSERT_GE(p.compute_grad_region, 0);
  ASSERT_GE(p.grad_region, 0);
  const size_t cap = 4096;
  const std::vector<GradientBucket> buckets = plan_gradient_buckets(p, cap);
  expect_every_gradient_byte_once(p, buckets);
  std::map<int, std::vector<const GradientBucket*>> by_region;
  for (const GradientBucket& b : buckets) by_region[b.region].push_back(&b);
  ASSERT_EQ(by_region.size(), 2u);
  for (auto& [region, list] : by_region) {
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    // All but the region's lowest bucket (the last to fill) reach the size asked for.
    for (size_t i = 1; i < list.size(); ++i)
      EXPECT_GE(list[i]->count * dtype_size(list[i]->dtype), cap) << p.tensors[size_t(region)].name;
  }
  EXPECT_EQ(by_region[p.compute_grad_region].front()->dtype, DType::F16);
  EXPECT_EQ(by_region[p.grad_region].front()->dtype, DType::F32);
}

}  // namespace
}  // namespace kiln
