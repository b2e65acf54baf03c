#include "core/op_scratch.h"

namespace kiln {
namespace {
thread_local OpScratch current;
}  // namespace

OpScratch op_scratch() { return current; }

OpScratchScope::OpScratchScope(OpScratch scratch) : saved_(current) { current = scratch; }
OpScratchScope::~OpScratchScope() { current = saved_; }

}  // namespace kiln
