#pragma once
// What a backend kernel receives: the op, its tensors resolved to memory, and step scalars.
#include <cstdint>
#include <vector>

#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/program.h"
#include "runtime/backend.h"
#include "runtime/op_contract.h"

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
  // The same scalars in device memory, rewritten before every step (nullptr on the CPU). Kernels
  // that a CUDA Graph replays read lr, step and seed here: values passed as kernel arguments
  // would stay those of the captured step.
  const StepScalars* device_scalars = nullptr;
  const Layer& layer() const { return program.layer_of(op); }
  // "CBR_FWD 'features.0'": how errors name the op and its layer.
  std::string where() const;
};

using OpFn = void (*)(const OpCall& call);
// Optional, run once when the executable is built (tensors bound, scalars zero): builds and
// tunes what the op needs (cuDNN plans) and requests its workspace from the backend.
using PrepareFn = void (*)(const OpCall& call);

// An op's tensors and attributes as its contract names them (op_contract.h), bound to memory.
template <template <class> class C>
C<TensorArg> op_args(const OpCall& call) {
  C<TensorArg> args{};
  contract_detail::Decode<OpCall, TensorArg> d{call};
  args.fields(d);
  if (d.next_in != call.in.size() || d.next_out != call.out.size() || d.next_attr != call.op.attrs.size())
    fail("{}: the program gives this op {} inputs, {} outputs and {} attributes, its contract {}, {} and {}; "
         "it is malformed (recompile it)",
         call.where(), call.in.size(), call.out.size(), call.op.attrs.size(), d.next_in, d.next_out, d.next_attr);
  return args;
}

// One kernel of a family's table: the contract's kind (or `kind`, for a contract shared by two
// kinds) run by Run with the op's named arguments, after Prepare when the program is built.
struct OpKernel {
  OpKind kind;
  OpFn run;
  PrepareFn prepare = nullptr;
};

template <template <class> class C>
using KernelFn = void (*)(const OpCall& call, const C<TensorArg>& args);

namespace contract_detail {
template <template <class> class C, KernelFn<C> F>
void call_with_args(const OpCall& call) {
  F(call, op_args<C>(call));
}
}  // namespace contract_detail

template <template <class> class C, KernelFn<C> Run, KernelFn<C> Prepare = nullptr>
OpKernel kernel(OpKind kind = C<TensorArg>::kind) {
  PrepareFn prepare = nullptr;
  if constexpr (Prepare != nullptr) prepare = &contract_detail::call_with_args<C, Prepare>;
  return {kind, &contract_detail::call_with_args<C, Run>, prepare};
}

// The kernels one op family has for one backend, defined in the family's folder as
// `extern const OpTable <family>_<backend>_ops` (namespace kiln::ops) in <family>_ops_<backend>.cpp;
// the build collects every such table (cmake/op_tables.cmake), so no list is kept by hand.
struct OpTable {
  Device device;
  std::vector<OpKernel> kernels;
};

OpFn find_op(Device device, OpKind kind);  // throws kiln::Error if the backend lacks it
PrepareFn find_prepare(Device device, OpKind kind);  // nullptr when the op needs none
// Registers the tables the build collected for a backend; idempotent. find_op calls the CPU one;
// the CUDA one is called by the CUDA backend (its tables exist only in CUDA builds).
void register_cpu_ops();
void register_cuda_ops();
void register_table(const OpTable& table);

// Kernels are written once as templates and run in float (FP32 programs) or double (FP64
// programs, used by gradient checks). Dispatches on the dtype of the op's first float tensor.
template <class F>
void dispatch_float(DType dtype, const char* what, F&& f) {
  if (dtype == DType::F32) return f(float{});
  if (dtype == DType::F64) return f(double{});
  fail("{}: dtype {} is not supported by the CPU backend (use fp32)", what, dtype_name(dtype));
}

}  // namespace kiln
