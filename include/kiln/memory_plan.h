#pragma once
// Static memory plan: one arena per program, every tensor at a fixed 256-byte aligned offset.
// Persistent tensors (inputs, outputs, parameters, gradients, optimizer state, buffers) come
// first, each role in one contiguous region; activations share the rest by lifetime. An activation
// that a persistent tensor views is persistent too, in that tensor's region (the logits of a head
// ending in a flatten view the layer before it), so what the caller reads after a step holds the
// step's values whatever layer ends the graph. Part of the compiled Program (Program::memory):
// compile() plans it, the runtime only reads it.
#include <cstddef>
#include <string>
#include <vector>

namespace kiln {

struct Program;

constexpr size_t kAlignment = 256;

struct Lifetime {
  int first = -1, last = -1;  // op positions in the step schedule; persistent: whole schedule
  bool persistent = false;
};

struct MemoryPlan {
  std::vector<size_t> offset;        // per tensor id (aliases resolved)
  std::vector<Lifetime> lifetime;    // per tensor id (of its storage root)
  size_t arena_bytes = 0;
  size_t persistent_bytes = 0;       // io + params + grads + opt state + buffers
  size_t param_bytes = 0, grad_bytes = 0, opt_state_bytes = 0, buffer_bytes = 0, io_bytes = 0;
  size_t activation_bytes = 0;       // shared activation pool
  size_t activation_sum_bytes = 0;   // what activations would take without sharing
};

// Schedule order used for lifetimes: forward, backward, update, inference. compile() stores the
// result in Program::memory; a program changed after compile() is planned again with this.
MemoryPlan plan_memory(const Program& program);

// Throws kiln::Error if two tensors with overlapping lifetimes share bytes, or a tensor the caller
// reads or writes outside the step (any role but Activation) has storage reused within it (a
// self-check).
void verify_memory_plan(const Program& program, const MemoryPlan& plan);

std::string format_plan(const Program& program, const MemoryPlan& plan);  // `kiln plan` text

}  // namespace kiln
