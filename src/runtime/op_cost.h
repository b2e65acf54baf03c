#pragma once
// What one execution of an op costs at least, for the profiler's floors (`kiln bench --profile`):
// the arithmetic of its matrix products and the bytes it must move, each tensor it reads read once
// and each it writes written once (a tensor it reads and rewrites, such as a parameter or a running
// statistic, counts twice). Each op family states the rule of each of its kinds beside its kernels,
// in src/ops/<family>/<family>_op_costs.cpp:
//
//   extern const OpCostTable conv_op_costs;  // namespace kiln::ops
//   const OpCostTable conv_op_costs{{OpKind::CONV_FWD, &conv_fwd_cost}, ...};
//
// and the build collects the tables (cmake/op_tables.cmake); every op kind has one rule.
#include <vector>

#include "kiln/program.h"
#include "runtime/op_contract.h"

namespace kiln {

struct OpCost {
  double flops = 0;  // multiply-adds count two
  double bytes = 0;
};

using OpCostFn = OpCost (*)(const Program& program, const Op& op);
struct OpCostRule {
  OpKind kind;
  OpCostFn cost;
};
using OpCostTable = std::vector<OpCostRule>;

// The cost of one execution of `op` by its family's rule; a kiln::Error names a kind with none.
OpCost op_cost(const Program& program, const Op& op);
// The rule of a kind, or nullptr (the registry test checks that every kind has one).
OpCostFn find_op_cost(OpKind kind);

// Helpers for the rules.
double tensor_bytes(const Program& program, TensorId t);  // 0 for an absent tensor
// Every tensor of the op once: the floor of an op that only streams its inputs to its outputs.
double each_tensor_once(const Program& program, const Op& op);
OpCost memory_bound(const Program& program, const Op& op);
// A convolution's or a matrix product's pass: 2 x (elements of `out`) x (the weight's elements per
// output channel, its first dimension being the output channels).
double matmul_pass_flops(const Program& program, TensorId out, TensorId weight);
// An op whose arithmetic is `passes` such passes and which moves each of its tensors once.
OpCost matmul_cost(const Program& program, const Op& op, TensorId out, TensorId weight, int passes = 1);
// Backward ops: the weight gradient always, the data gradient where the layer has one.
inline int gradient_passes(TensorId dx) { return dx.present() ? 2 : 1; }

namespace cost_detail {
// Reads a contract's fields from an Op in fields() order: tensor ids, no memory.
struct ReadIds {
  const Op& op;
  size_t in_at = 0, out_at = 0, attr_at = 0;
  void in(const char*, TensorId& t, Presence = kRequired) { t = in_at < op.in.size() ? op.in[in_at++] : -1; }
  void out(const char*, TensorId& t, Presence = kRequired) { t = out_at < op.out.size() ? op.out[out_at++] : -1; }
  void in_list(const char*, std::vector<TensorId>& ts) {
    while (in_at < op.in.size()) ts.push_back(op.in[in_at++]);
  }
  template <class A>
  void attr(const char*, A& value) {
    value = contract_detail::attr_from_double<A>(attr_at < op.attrs.size() ? op.attrs[attr_at++] : 0.0);
  }
};
}  // namespace cost_detail

// The op's tensors and attributes as its contract names them (ids only: no memory).
template <template <class> class C>
C<TensorId> op_fields(const Op& op) {
  C<TensorId> fields{};
  cost_detail::ReadIds read{op};
  fields.fields(read);
  return fields;
}

}  // namespace kiln
