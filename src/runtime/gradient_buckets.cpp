#include "runtime/gradient_buckets.h"

#include <algorithm>
#include <map>

#include "kiln/error.h"

namespace kiln {
namespace {

// Where tensor `id` lies: the tensor that owns its storage, and its byte range there.
struct Extent {
  int root = -1;
  size_t begin = 0, end = 0;
};

Extent extent_of(const Program& p, int id) {
  Extent e{id, 0, p.tensors[size_t(id)].bytes()};
  while (p.tensors[size_t(e.root)].alias_of >= 0) {
    const TensorSpec& t = p.tensors[size_t(e.root)];
    e.begin += t.alias_offset, e.end += t.alias_offset;
    e.root = t.alias_of;
  }
  return e;
}

bool overlaps(const Extent& a, const Extent& b) { return a.root == b.root && a.begin < b.end && b.begin < a.end; }

}  // namespace

std::vector<GradientBucket> plan_gradient_buckets(const Program& p, size_t bucket_bytes) {
  if (bucket_bytes == 0) fail("internal: gradient buckets of 0 bytes");
  const int last_op = int(p.backward.size()) - 1;
  // Each gradient's extent and the last backward op that writes into it.
  struct Grad {
    int id;
    Extent extent;
    int ready;
  };
  std::map<int, std::vector<Grad>> by_region;
  for (int id : p.grads) {
    const Extent e = extent_of(p, id);
    if (e.root != p.grad_region && e.root != p.compute_grad_region)
      fail("internal: gradient '{}' lies outside the gradient regions", p.tensors[size_t(id)].name);
    by_region[e.root].push_back({id, e, -1});
  }
  for (int k = 0; k <= last_op; ++k)
    for (int out : p.backward[size_t(k)].out) {
      if (out < 0) continue;
      const Extent written = extent_of(p, out);
      if (!by_region.count(written.root)) continue;
      for (Grad& g : by_region[written.root])
        if (overlaps(g.extent, written)) g.ready = k;
    }
  std::vector<GradientBucket> buckets;
  for (auto& [region, grads] : by_region) {
    const TensorSpec& r = p.tensors[size_t(region)];
    const size_t element = dtype_size(r.dtype);
    // From the region's end down: the backward writes the last layers' gradients first.
    std::sort(grads.begin(), grads.end(), [](const Grad& a, const Grad& b) { return a.extent.begin > b.extent.begin; });
    GradientBucket b;
    size_t top = 0;  // the end of the open bucket
    auto close = [&](size_t bottom) {
      b.region = region, b.dtype = r.dtype;
      b.offset = bottom, b.count = (top - bottom) / element;
      buckets.push_back(std::move(b));
      b = GradientBucket{};
    };
    for (size_t i = 0; i < grads.size(); ++i) {
      const Grad& g = grads[i];
      if (b.grads.empty()) top = g.extent.end;
      b.grads.push_back(g.id);
      b.ready_after = std::max(b.ready_after, g.ready < 0 ? last_op : g.ready);
      // The bucket reaches down to the next gradient's end, so the padding between them is in it.
      const size_t bottom = i + 1 < grads.size() ? grads[i + 1].extent.end : g.extent.begin;
      if (top - bottom >= bucket_bytes || i + 1 == grads.size()) close(i + 1 < grads.size() ? bottom : g.extent.begin);
    }
  }
  std::stable_sort(buckets.begin(), buckets.end(), [](const GradientBucket& a, const GradientBucket& b) {
    return a.ready_after != b.ready_after ? a.ready_after < b.ready_after : a.offset > b.offset;
  });
  return buckets;
}

}  // namespace kiln
