#pragma once
// Checked access to an op's tensors, shared by the CPU op wrappers: a missing tensor means the
// program is malformed, and the error names the layer and the op.
#include <string>
#include <vector>

#include "runtime/op_call.h"

namespace kiln {

inline std::string layer_name(const OpCall& call) {
  return call.op.layer >= 0 ? call.layer().name : std::string(op_kind_name(call.op.kind));
}

// Prefix for errors raised outside the wrapper (dtype dispatch).
inline std::string layer_label(const OpCall& call) { return "layer '" + layer_name(call) + "'"; }

inline const TensorArg& required(const OpCall& call, const std::vector<TensorArg>& args, size_t i,
                                 const char* role) {
  if (i >= args.size() || !args[i])
    fail("layer '{}': {} has no '{}' tensor; the program is malformed (recompile it)", layer_name(call),
         op_kind_name(call.op.kind), role);
  return args[i];
}

inline TensorArg optional_arg(const std::vector<TensorArg>& args, size_t i) {
  return i < args.size() ? args[i] : TensorArg{};
}

}  // namespace kiln
