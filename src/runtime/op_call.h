#pragma once
// What a backend kernel receives: the op, its tensors resolved to memory, and step scalars.
#include <cstdint>
#include <vector>

#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/program.h"
#include "runtime/backend.h"

namespace kiln {

struct TensorArg {
  const TensorSpec* spec = nullptr;  // nullptr when the optional tensor is absent
  void* data = nullptr;
  explicit operator bool() const { return data != nullptr; }
  template <class T>
  T* as() const { return static_cast<T*>(data); }
  const Shape& shape() const { return spec->shape; }
  int64_t numel() const { return kiln::numel(spec->shape); }
  DType dtype() const { return spec->dtype; }
};

struct OpCall {
  const Op& op;
  const Program& program;
  std::vector<TensorArg> in, out;
  const StepScalars& scalars;
  Backend* backend = nullptr;  // the executable's backend (CUDA ops reach streams and handles here)
  const Layer& layer() const { return program.layer_of(op); }
  // "CBR_FWD 'features.0'": how errors name the op and its layer.
  std::string where() const;
};

using OpFn = void (*)(const OpCall& call);
// Optional, run once when the executable is built (tensors bound, scalars zero): builds and
// tunes what the op needs (cuDNN plans) and requests its workspace from the backend.
using PrepareFn = void (*)(const OpCall& call);

// Each op family registers its kernels from one function (e.g. register_conv_cpu), called by
// the backend's register function: explicit calls survive static linking, static
// constructors would not.
void register_op(Device device, OpKind kind, OpFn fn, PrepareFn prepare = nullptr);
OpFn find_op(Device device, OpKind kind);  // throws kiln::Error if the backend lacks it
PrepareFn find_prepare(Device device, OpKind kind);  // nullptr when the op needs none
void register_cpu_ops();                    // idempotent; src/ops/register_cpu.cpp
void register_cuda_ops();                   // idempotent; src/ops/register_cuda.cpp (CUDA builds)

// Kernels are written once as templates and run in float (FP32 programs) or double (FP64
// programs, used by gradient checks). Dispatches on the dtype of the op's first float tensor.
template <class F>
void dispatch_float(DType dtype, const char* what, F&& f) {
  if (dtype == DType::F32) return f(float{});
  if (dtype == DType::F64) return f(double{});
  fail("{}: dtype {} is not supported by the CPU backend (use fp32)", what, dtype_name(dtype));
}

}  // namespace kiln
