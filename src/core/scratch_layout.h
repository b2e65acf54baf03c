#pragma once
// Carves an op's scratch pieces out of one buffer, each aligned to `align` bytes. The same layout
// is computed when the op is prepared, with no buffer (to measure the total it requests), and when
// it runs, on the buffer it was given: the CPU backend's workspace (core/op_scratch.h) or a CUDA
// stream's (ops/common/workspace_cuda.h).
#include <cstddef>
#include <cstdint>

namespace kiln {

class ScratchLayout {
 public:
  explicit ScratchLayout(void* base = nullptr, size_t align = 64)
      : base_(static_cast<std::byte*>(base)), align_(align) {}
  // Reserves `bytes` and returns where they start (nullptr while only measuring).
  void* take(size_t bytes) {
    std::byte* at = base_ ? base_ + used_ : nullptr;
    used_ += (bytes + align_ - 1) / align_ * align_;
    return at;
  }
  float* floats(int64_t n) { return static_cast<float*>(take(size_t(n) * sizeof(float))); }
  size_t used() const { return used_; }

 private:
  std::byte* base_;
  size_t align_;
  size_t used_ = 0;
};

}  // namespace kiln
