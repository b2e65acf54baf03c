#pragma once
// Named op contracts. Each op kind declares, beside its kernels (src/ops/<family>/
// <family>_contract.h), one struct template naming its tensors and its attributes:
//
//   template <class T>
//   struct ReluForward {
//     static constexpr OpKind kind = OpKind::RELU_FWD;
//     T x, y, mask;  // mask: one byte per element
//     template <class V> void fields(V& v) { v.in("x", x); v.out("y", y); v.out("mask", mask); }
//   };
//
// Lowering fills a ReluForward<TensorId> and turns it into an Op (make_op); a kernel receives a
// ReluForward<TensorArg> with every field bound to memory (op_args). Attributes are plain members
// listed with v.attr("eps", eps); optional tensors with v.in("bias", bias, kOptional); a variable
// number of inputs (GRAD_SUM) with v.in_list("terms", terms), after the other inputs. The order of
// the calls in fields() is the only record of where Op::in, Op::out and Op::attrs keep each
// field, and only this adapter reads it.
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "kiln/program.h"

namespace kiln {

// A tensor of the program while lowering; -1 means absent.
struct TensorId {
  int id = -1;
  TensorId() = default;
  TensorId(int i) : id(i) {}  // NOLINT: ids convert implicitly, as the ints they are
  operator int() const { return id; }
  bool present() const { return id >= 0; }
};

enum Presence : bool { kRequired = false, kOptional = true };

namespace contract_detail {

// Writes a contract's fields into an Op, in fields() order.
struct Encode {
  Op& op;
  const char* kind;
  void in(const char* name, const TensorId& t, Presence p = kRequired) { push(op.in, name, t, p); }
  void out(const char* name, const TensorId& t, Presence p = kRequired) { push(op.out, name, t, p); }
  void in_list(const char* name, const std::vector<TensorId>& ts) {
    if (ts.empty()) fail("internal: {} lowered with no '{}' tensors", kind, name);
    for (const TensorId& t : ts) push(op.in, name, t, kRequired);
  }
  template <class A>
  void attr(const char*, const A& value) {
    static_assert(std::is_arithmetic_v<A> || std::is_enum_v<A>, "attributes are numbers, flags or enums");
    if constexpr (std::is_enum_v<A>)
      op.attrs.push_back(static_cast<double>(static_cast<std::underlying_type_t<A>>(value)));
    else
      op.attrs.push_back(static_cast<double>(value));
  }
  void push(std::vector<int>& list, const char* name, const TensorId& t, Presence p) {
    if (!t.present() && p == kRequired) fail("internal: {} lowered without its '{}' tensor", kind, name);
    list.push_back(t.id);
  }
};

// An attribute as Op::attrs stores it (a double), back in its field's type.
template <class A>
A attr_from_double(double stored) {
  if constexpr (std::is_enum_v<A>)
    return static_cast<A>(static_cast<std::underlying_type_t<A>>(stored));
  else
    return static_cast<A>(stored);
}

// Reads a contract's fields back from a bound call, in the same order; a missing required tensor
// is an error naming the op, its layer and the field.
template <class Call, class Arg>
struct Decode {
  const Call& call;
  size_t next_in = 0, next_out = 0, next_attr = 0;
  void in(const char* name, Arg& t, Presence p = kRequired) { t = take(call.in, next_in, name, p); }
  void out(const char* name, Arg& t, Presence p = kRequired) { t = take(call.out, next_out, name, p); }
  void in_list(const char* name, std::vector<Arg>& ts) {
    ts.clear();
    while (next_in < call.in.size()) ts.push_back(take(call.in, next_in, name, kRequired));
    if (ts.empty()) missing(name);
  }
  template <class A>
  void attr(const char* name, A& value) {
    if (next_attr >= call.op.attrs.size()) missing(name);
    value = attr_from_double<A>(call.op.attrs[next_attr++]);
  }
  Arg take(const std::vector<Arg>& list, size_t& next, const char* name, Presence p) {
    if (next >= list.size()) missing(name);
    const Arg& a = list[next++];
    if (!a && p == kRequired) missing(name);
    return a;
  }
  [[noreturn]] void missing(const char* name) {
    fail("{}: the program gives this op no '{}'; it is malformed (recompile it)", call.where(), name);
  }
};

}  // namespace contract_detail

// The Op for a filled contract (lowering).
template <template <class> class C>
Op make_op(C<TensorId> contract, int layer) {
  Op op{C<TensorId>::kind, layer, {}, {}, {}};
  contract_detail::Encode e{op, op_kind_name(op.kind)};
  contract.fields(e);
  if constexpr (requires { C<TensorId>::side_work_outlives_op; }) op.side_work_outlives = C<TensorId>::side_work_outlives_op;
  return op;
}

}  // namespace kiln
