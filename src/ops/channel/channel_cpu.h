#pragma once
// The channel family's CPU kernels (float and double): copies between the rows of channels-last
// tensors (rows = N*H*W for a map, N for flat features), each element moved bit for bit. Rows are
// cut into pieces by the problem's size alone (core/parallel.h) and every piece writes only its
// own rows, so any thread count gives the same bytes. Outputs must not overlap inputs.
#include <cstdint>
#include <vector>

namespace kiln::cpu {

// y[r, j * groups + i] = x[r, i * (channels / groups) + j] for i < groups, j < channels / groups
// (groups divides channels). Its inverse, the backward, is the same with channels / groups groups.
template <class T>
void shuffle_channels(const T* x, T* y, int64_t rows, int64_t channels, int64_t groups);

// y[r, k] = x[r, start + k] for k < count: rows of in_channels in x, of count in y.
template <class T>
void slice_channels(const T* x, int64_t in_channels, int64_t start, T* y, int64_t rows, int64_t count);

// One slice's gradient: `channels` a row.
template <class T>
struct SliceGradient {
  const T* dy = nullptr;
  int64_t channels = 0;
};

// dx[r, start + o_s + k] = parts[s].dy[r, k] (o_s: the channels of the parts before s), 0 in every
// other channel of dx's rows of `channels`: the parts' channels add up to at most channels - start.
template <class T>
void join_slice_gradients(const std::vector<SliceGradient<T>>& parts, int64_t start, T* dx, int64_t rows,
                          int64_t channels);

}  // namespace kiln::cpu
