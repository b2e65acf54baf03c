#pragma once
// Carves an op's scratch pieces out of one backend workspace, each 256-byte aligned. The same
// layout is computed when the op is prepared (to request the total) and when it runs.
#include <cstddef>
#include <cstdint>

namespace kiln::cuda {

class WorkspaceLayout {
 public:
  explicit WorkspaceLayout(void* base = nullptr) : base_(static_cast<std::byte*>(base)) {}
  // Reserves `bytes` and returns where they start (nullptr while only measuring).
  void* take(size_t bytes) {
    std::byte* at = base_ ? base_ + used_ : nullptr;
    used_ += (bytes + 255) / 256 * 256;
    return at;
  }
  float* floats(int64_t n) { return static_cast<float*>(take(size_t(n) * sizeof(float))); }
  size_t used() const { return used_; }

 private:
  std::byte* base_;
  size_t used_ = 0;
};

}  // namespace kiln::cuda
