#pragma once
// The scratch memory the CPU backend lends the op it is running: its workspace, allocated once
// after the program's ops were prepared, as large as the largest request an op's prepare hook made
// (Backend::request_workspace). Kernels deep below an op (a CBR's convolution on oneDNN) carve
// their buffers out of it, so a step allocates nothing. Outside an op (a test calling a kernel
// directly) there is none, and such kernels use buffers of their own.
#include <cstddef>

namespace kiln {

struct OpScratch {
  std::byte* base = nullptr;
  size_t bytes = 0;
};

// The calling thread's current scratch (empty outside an op the CPU backend runs).
OpScratch op_scratch();

// Lends `scratch` to the calling thread until the scope ends (CpuBackend, around each op).
class OpScratchScope {
 public:
  explicit OpScratchScope(OpScratch scratch);
  ~OpScratchScope();
  OpScratchScope(const OpScratchScope&) = delete;
  OpScratchScope& operator=(const OpScratchScope&) = delete;

 private:
  OpScratch saved_;
};

// Carves 64-byte aligned pieces out of one buffer; the same layout measured (base nullptr) when a
// program is prepared and taken when an op runs.
class ScratchLayout {
 public:
  explicit ScratchLayout(std::byte* base = nullptr) : base_(base) {}
  std::byte* take(size_t bytes) {
    std::byte* at = base_ ? base_ + used_ : nullptr;
    used_ += (bytes + 63) / 64 * 64;
    return at;
  }
  size_t used() const { return used_; }

 private:
  std::byte* base_;
  size_t used_ = 0;
};

}  // namespace kiln
