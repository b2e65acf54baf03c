// The elementwise ops the compiler places itself (compile/compiler_ops.h), made from their contracts.
#include "compile/compiler_ops.h"
#include "ops/elementwise/elementwise_contract.h"

namespace kiln {

Op gradient_sum_op(const std::vector<TensorId>& terms, TensorId sum, int layer) {
  GradSum<TensorId> op;
  op.terms = terms;
  op.sum = sum;
  return make_op(op, layer);
}

Op copy_cast_op(TensorId from, TensorId to) { return make_op(Cast<TensorId>{from, to}, -1); }

}  // namespace kiln
