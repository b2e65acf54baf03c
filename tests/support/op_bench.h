#pragma once
// The op tests' one fixture: a hand-built program around (at most) one layer, whose tensors live
// in host memory, for running registered CPU ops as an executable would and checking the errors
// they raise. Tensors are either
//   - the bench's own: add() makes a named program tensor (zeros, seeded uniform values or given
//     values); run() binds an op's tensor ids to them (`unbound` leaves one out, as a malformed
//     program would), or
//   - the test's buffers: arg() makes an anonymous spec over caller memory, for OpCalls a test
//     builds itself.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/program.h"
#include "runtime/op_call.h"
#include "support/cpu_test_util.h"
#include "support/half_host.h"

namespace kiln::testing {

class OpBench {
 public:
  Program program;
  StepScalars scalars;
  int unbound = -1;              // a tensor id run() binds to nothing (a malformed program)
  DType arg_dtype = DType::F64;  // arg()'s dtype when none is given

  // No layer: ops made by run(contract) belong to none (layer -1), as update ops.
  OpBench() = default;
  // Layer `layer` of the program is `name` (earlier ones are unnamed placeholders): errors name it.
  explicit OpBench(int layer, const std::string& name, LayerKind kind = LayerKind::Input, LayerAttrs attrs = {})
      : layer_(layer) {
    program.graph.layers.resize(size_t(layer) + 1);
    Layer& l = program.graph.layers[size_t(layer)];
    l.name = name, l.kind = kind, l.attrs = attrs;
  }

  int layer() const { return layer_; }
  const Layer& layer_spec() const { return program.graph.layers.at(size_t(layer_)); }

  // --- The bench's own tensors ---

  // A program tensor of zeros. Its memory has room for numel doubles whatever the dtype, so a
  // kernel reading it in another precision stays inside it.
  int add(const std::string& name, Shape shape, DType dtype) {
    TensorSpec spec;
    spec.name = name, spec.shape = std::move(shape), spec.dtype = dtype;
    program.tensors.push_back(spec);
    memory_.emplace_back(size_t(numel(program.tensors.back().shape)) * sizeof(double));
    return static_cast<int>(program.tensors.size()) - 1;
  }
  // The same holding uniform_vec(seed) values in [-1, 1), stored as its dtype.
  int add(const std::string& name, Shape shape, DType dtype, unsigned seed) {
    const int id = add(name, std::move(shape), dtype);
    std::mt19937 rng(seed);
    fill(id, uniform_vec(rng, size_t(numel(program.tensors[id].shape))));
    return id;
  }
  // A one-dimensional F64 tensor holding `values`.
  int add(const std::string& name, const std::vector<double>& values) {
    const int id = add(name, {static_cast<int64_t>(values.size())}, DType::F64);
    fill(id, values);
    return id;
  }

  template <class T>
  T* data(int id) {
    return reinterpret_cast<T*>(memory_[size_t(id)].data());
  }
  // Stores `values` (as many as fit) in the tensor's dtype.
  void fill(int id, const std::vector<double>& values) {
    const TensorSpec& spec = program.tensors[id];
    const size_t n = std::min(values.size(), size_t(numel(spec.shape)));
    const std::vector<double> head(values.begin(), values.begin() + std::ptrdiff_t(n));
    switch (spec.dtype) {
      case DType::F64: std::memcpy(data<double>(id), head.data(), n * sizeof(double)); break;
      case DType::F32: case DType::F16: case DType::BF16: {
        const std::vector<std::byte> bytes = encode(spec.dtype, head);
        std::memcpy(data<std::byte>(id), bytes.data(), bytes.size());
        break;
      }
      case DType::I32: for (size_t i = 0; i < n; ++i) data<int32_t>(id)[i] = static_cast<int32_t>(head[i]); break;
      default: for (size_t i = 0; i < n; ++i) data<uint8_t>(id)[i] = static_cast<uint8_t>(head[i]); break;
    }
  }
  // The tensor's elements read as T (T must be its element type).
  template <class T = double>
  std::vector<T> values(int id) {
    const T* p = data<T>(id);
    return std::vector<T>(p, p + numel(program.tensors[id].shape));
  }

  // The OpCall argument of tensor `id`: nothing for -1 and for `unbound`.
  TensorArg bound(int id) {
    if (id < 0 || id == unbound) return {};
    return {&program.tensors[id], memory_[size_t(id)].data()};
  }

  // Runs `op` on the bench's tensors through the CPU registry.
  void run(const Op& op) {
    OpCall call{op, program, {}, {}, scalars};
    for (int id : op.in) call.in.push_back(bound(id));
    for (int id : op.out) call.out.push_back(bound(id));
    find_op(Device::CPU, op.kind)(call);
  }
  // The op of a contract over the bench's tensor ids, in the bench's layer.
  template <template <class> class C>
  void run(const C<TensorId>& contract) {
    run(make_op(contract, layer_));
  }

  // --- The test's buffers ---

  TensorArg arg(Shape shape, void* data) { return arg(std::move(shape), data, arg_dtype); }
  TensorArg arg(Shape shape, void* data, DType dtype) {
    TensorSpec& s = specs_.emplace_back();  // a deque keeps spec addresses stable as args are added
    s.shape = std::move(shape);
    s.dtype = dtype;
    return TensorArg{&s, data};
  }

 private:
  int layer_ = -1;
  std::vector<std::vector<std::byte>> memory_;  // one buffer per program tensor; never moves
  std::deque<TensorSpec> specs_;
};

}  // namespace kiln::testing
