#pragma once
// The extents of a group normalization, which the lowering, the op checks and both backends'
// kernels share: n samples of hw positions (1 for flat (N,C) features) of c channels, cut into
// `groups` groups of c / groups consecutive channels. Channels-last, a sample's group is strided
// in memory: its c / groups channels at each of its hw positions, group_elements() values
// normalized together.
//
// The GPU's two-stage reductions keep their partial sums in a workspace tensor that the lowering
// declares (the op allocates nothing: a CUDA Graph captures it), so the workspace's layout is a
// function of the extents alone, given here.
#include <algorithm>
#include <cstdint>

namespace kiln {

struct GroupNormGeom {
  int64_t n = 0, hw = 0, c = 0, groups = 1;
  int64_t group_channels() const { return c / groups; }
  int64_t group_elements() const { return hw * group_channels(); }
  int64_t elements() const { return n * hw * c; }
  int64_t statistics() const { return n * groups; }  // one mean and rstd per (sample, group)
};

namespace group_norm_gpu {

// Each sample's positions in chunks of `rows` (the last one shorter), one GPU block's share of a
// first stage: at least kMinRows positions a chunk (fewer would cost more to combine than they
// save), and no more than about kTargetChunks chunks across the batch (enough blocks to fill an
// H100 several times over; more only grow the workspace).
inline constexpr int64_t kMinRows = 64;
inline constexpr int64_t kTargetChunks = 2048;

struct Chunks {
  int64_t rows = 1, count = 1;  // positions a chunk, chunks a sample
};

inline Chunks chunks(const GroupNormGeom& g) {
  const int64_t hw = std::max<int64_t>(g.hw, 1);
  const int64_t spread = (g.n * hw + kTargetChunks - 1) / kTargetChunks;
  const int64_t rows = std::min(hw, std::max(kMinRows, spread));
  return {rows, (hw + rows - 1) / rows};
}

// The workspace, in floats from its start:
//   partials      [2][n][chunks][c]  per (sample, chunk, channel): the forward's mean and sum of
//                                    squared deviations, the backward's sums of dy and dy * xhat;
//   sample_sums   [2][n][c]          the backward's per (sample, channel) sums of the two;
//   coefficients  [2][n][groups]     the forward's mean and rstd, the backward's mean(g) and
//                                    mean(g * xhat) of each (sample, group).
struct Workspace {
  int64_t partials = 0, sample_sums = 0, coefficients = 0, floats = 0;
};

inline Workspace workspace(const GroupNormGeom& g) {
  Workspace w;
  w.partials = 0;
  w.sample_sums = w.partials + 2 * g.n * chunks(g).count * g.c;
  w.coefficients = w.sample_sums + 2 * g.n * g.c;
  w.floats = w.coefficients + 2 * g.statistics();
  return w;
}

}  // namespace group_norm_gpu
}  // namespace kiln
