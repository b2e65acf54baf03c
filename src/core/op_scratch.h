#pragma once
// The scratch memory the CPU backend lends the op it is running: its workspace, allocated once
// after the program's ops were prepared, as large as the largest request an op's prepare hook made
// (Backend::request_workspace). Kernels deep below an op (a CBR's convolution on oneDNN) carve
// their buffers out of it, so a step allocates nothing. Outside an op (a test calling a kernel
// directly) there is none, and such kernels use buffers of their own. ScratchLayout
// (core/scratch_layout.h) carves it.
#include <cstddef>

namespace kiln {

struct OpScratch {
  std::byte* base = nullptr;
  size_t bytes = 0;
};

// The calling thread's current scratch (empty outside an op the CPU backend runs).
OpScratch op_scratch();

// Lends `scratch` to the calling thread until the scope ends (Executable::run_op, around each op).
class OpScratchScope {
 public:
  explicit OpScratchScope(OpScratch scratch);
  ~OpScratchScope();
  OpScratchScope(const OpScratchScope&) = delete;
  OpScratchScope& operator=(const OpScratchScope&) = delete;

 private:
  OpScratch saved_;
};

}  // namespace kiln
