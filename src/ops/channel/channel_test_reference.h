#pragma once
// The tests' float64 reference of the channel family's copies (channel_test.cpp, channel_program_test.cpp,
// channel_gpu_test.cpp), written from PyTorch's definitions on rows of channels (a row: one pixel of
// an NHWC map, or one sample of flat features), with explicit loops independent of the kernels'.
#include <cstdint>
#include <vector>

namespace kiln::channel_test {

using Values = std::vector<double>;

// torchvision's channel_shuffle(x, g): x.view(N, g, C / g, H, W).transpose(1, 2) moves element (i, j)
// of each pixel's g x (C / g) channels to (j, i) of the (C / g) x g view, flattened back to C.
inline Values shuffle(const Values& x, int64_t rows, int64_t c, int64_t g) {
  const int64_t m = c / g;
  Values y(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < g; ++i)
      for (int64_t j = 0; j < m; ++j) y[size_t(r * c + j * g + i)] = x[size_t(r * c + i * m + j)];
  return y;
}

// The shuffle's inverse, its backward: the gradient at (j, i) of the transposed view goes back to (i, j).
inline Values unshuffle(const Values& dy, int64_t rows, int64_t c, int64_t g) {
  const int64_t m = c / g;
  Values dx(dy.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < m; ++j)
      for (int64_t i = 0; i < g; ++i) dx[size_t(r * c + i * m + j)] = dy[size_t(r * c + j * g + i)];
  return dx;
}

// x.narrow(1, start, count).
inline Values slice(const Values& x, int64_t rows, int64_t c, int64_t start, int64_t count) {
  Values y;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = start; k < start + count; ++k) y.push_back(x[size_t(r * c + k)]);
  return y;
}

// narrow's backward added into dx: dy into channels [start, start + count) of rows of c channels.
inline void add_slice_gradient(Values& dx, const Values& dy, int64_t rows, int64_t c, int64_t start, int64_t count) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < count; ++k) dx[size_t(r * c + start + k)] += dy[size_t(r * count + k)];
}

// torch.cat(parts, dim=1) of rows: each part's channels in turn.
inline Values cat(const std::vector<Values>& parts, const std::vector<int64_t>& channels, int64_t rows) {
  Values y;
  for (int64_t r = 0; r < rows; ++r)
    for (size_t p = 0; p < parts.size(); ++p)
      for (int64_t k = 0; k < channels[p]; ++k) y.push_back(parts[p][size_t(r * channels[p] + k)]);
  return y;
}

}  // namespace kiln::channel_test
