#include "runtime/op_cost.h"

#include <map>

#include "kiln/error.h"

namespace kiln {

const std::vector<const OpCostTable*>& op_cost_tables();  // written by the build (cmake/op_tables.cmake)

namespace {

const std::map<OpKind, OpCostFn>& rules() {
  static const std::map<OpKind, OpCostFn> by_kind = [] {
    std::map<OpKind, OpCostFn> m;
    for (const OpCostTable* table : op_cost_tables())
      for (const OpCostRule& rule : *table)
        if (!m.emplace(rule.kind, rule.cost).second)
          fail("internal: two cost rules for op {}", op_kind_name(rule.kind));
    return m;
  }();
  return by_kind;
}

}  // namespace

OpCostFn find_op_cost(OpKind kind) {
  const auto it = rules().find(kind);
  return it == rules().end() ? nullptr : it->second;
}

OpCost op_cost(const Program& program, const Op& op) {
  const OpCostFn rule = find_op_cost(op.kind);
  if (!rule)
    fail("internal: op {} has no cost rule; its family states one in src/ops/<family>/<family>_op_costs.cpp",
         op_kind_name(op.kind));
  return rule(program, op);
}

double tensor_bytes(const Program& program, TensorId t) {
  return t.present() ? double(program.tensors[t].bytes()) : 0.0;
}

double each_tensor_once(const Program& program, const Op& op) {
  double bytes = 0;
  for (const auto* ids : {&op.in, &op.out})
    for (int id : *ids) bytes += tensor_bytes(program, id);
  return bytes;
}

OpCost memory_bound(const Program& program, const Op& op) { return {0, each_tensor_once(program, op)}; }

double matmul_pass_flops(const Program& program, TensorId out, TensorId weight) {
  const Shape& w = program.tensors[weight].shape;
  const double per_output = double(numel(w)) / double(w[0]);
  return 2.0 * double(numel(program.tensors[out].shape)) * per_output;
}

OpCost matmul_cost(const Program& program, const Op& op, TensorId out, TensorId weight, int passes) {
  return {passes * matmul_pass_flops(program, out, weight), each_tensor_once(program, op)};
}

}  // namespace kiln
