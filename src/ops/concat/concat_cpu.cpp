#include "ops/concat/concat_cpu.h"

#include <cstring>

namespace kiln::cpu {

template <class T>
void copy_channels(const T* src, int64_t src_channels, int64_t src_offset, T* dst, int64_t dst_channels,
                   int64_t dst_offset, int64_t rows, int64_t channels) {
  const size_t row_bytes = size_t(channels) * sizeof(T);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * dst_channels + dst_offset, src + r * src_channels + src_offset, row_bytes);
}

template void copy_channels<float>(const float*, int64_t, int64_t, float*, int64_t, int64_t, int64_t, int64_t);
template void copy_channels<double>(const double*, int64_t, int64_t, double*, int64_t, int64_t, int64_t, int64_t);

}  // namespace kiln::cpu
