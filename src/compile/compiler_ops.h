#pragma once
// The ops the compiler places itself, whatever the layers: the sum of a fan-out's gradients
// (LowerContext::grad_out) and the rounded copy of parameters into their compute copies (the
// program's refresh_copies). Their contracts are the elementwise family's, which makes them
// (src/ops/elementwise/compiler_ops_lowering.cpp), so the compiler includes no op family.
#include <vector>

#include "kiln/program.h"
#include "runtime/op_contract.h"

namespace kiln {

// GRAD_SUM: `sum` = the sum of `terms`, in the backward of `layer`.
Op gradient_sum_op(const std::vector<TensorId>& terms, TensorId sum, int layer);

// CAST: `to` = `from` rounded to `to`'s dtype (a parameter's fp16/bf16 copy), of no layer.
Op copy_cast_op(TensorId from, TensorId to);

}  // namespace kiln
