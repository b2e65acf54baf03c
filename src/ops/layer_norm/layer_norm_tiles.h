#pragma once
// How the GPU's backward sums dweight and dbias over rows without float atomics: the rows are cut
// into tiles of consecutive rows, each tile writes one row of 2C partial sums (C for dweight, then C
// for dbias) into a workspace, and a second pass adds the tiles' partials in tile order. The cut
// depends on the row count alone, so the lowering declares the workspace ([tiles, 2, C] fp32) and
// every run adds the same numbers in the same order.
#include <algorithm>
#include <cstdint>

namespace kiln::layer_norm_tiles {

// At least this many rows per tile (fewer would make the second pass longer than the first), and
// at most this many tiles: enough blocks to fill a GPU, few enough for the second pass to add.
constexpr int64_t kMinRows = 32;
constexpr int64_t kMaxTiles = 1024;

struct Tiles {
  int64_t count = 1, rows = 1;  // tiles, and rows per tile (the last may hold fewer)
};

inline Tiles tiles(int64_t rows) {
  const int64_t wanted = std::clamp<int64_t>((rows + kMinRows - 1) / kMinRows, 1, kMaxTiles);
  Tiles t;
  t.rows = std::max<int64_t>(1, (rows + wanted - 1) / wanted);
  t.count = std::max<int64_t>(1, (rows + t.rows - 1) / t.rows);
  return t;
}

// The workspace's elements for `rows` rows of `c` channels.
inline int64_t partial_elements(int64_t rows, int64_t c) { return tiles(rows).count * 2 * c; }

}  // namespace kiln::layer_norm_tiles
