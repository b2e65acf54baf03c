#pragma once
// A compiled Program: every tensor the run needs (with dtype, shape and role) and the op lists
// for forward (training), backward, update and inference (and, in mixed precision, the refresh of
// the weights' compute copies). Ops name tensors by index.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/layer_graph.h"
#include "kiln/memory_plan.h"
#include "kiln/op_kinds.h"
#include "kiln/options.h"

namespace kiln {

enum class TensorRole : uint8_t {
  Input,       // data batch (persistent, written by the trainer)
  Label,       // int32 labels (persistent)
  Output,      // read by the trainer after a step: loss, logits (persistent)
  Param,       // trainable parameters (one contiguous region)
  Grad,        // fp32/fp64 gradients of the parameters without a compute copy (contiguous, same order)
  OptState,    // optimizer state (contiguous, same order per slot)
  Buffer,      // non-trainable state: BN running statistics
  ComputeParam,  // mixed precision: fp16/bf16 copies of weights the convolutions read (contiguous),
                 // written by the optimizer update and by Program::refresh_copies
  ComputeGrad,   // mixed precision: the gradients of those weights, in fp16/bf16 (their only gradient)
  OutputGrad,    // programs without a loss: the gradient of the output, written by the caller
  Activation,    // everything with a lifetime inside one step
};

// How a parameter starts. KaimingNormalFanOut: N(0, 2 / fan_out); UniformFanIn: U(±1 / sqrt(fan_in))
// (nn.Linear's and nn.Conv2d's default); Normal: N(0, init_value²); Uniform: U(±init_value);
// TruncatedNormal: N(0, init_value²) redrawn outside ±2 (torch.nn.init.trunc_normal_'s default
// cut, absolute, not in standard deviations).
enum class Init : uint8_t {
  None, Zeros, Ones, KaimingNormalFanOut, UniformFanIn, Constant, Normal, Uniform, TruncatedNormal
};

struct TensorSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
  TensorRole role = TensorRole::Activation;
  Init init = Init::None;
  int64_t fan_in = 0, fan_out = 0;  // for initializers
  double init_value = 0;            // Init::Constant's value, the standard deviation or bound of the others
  // A view of another tensor's storage (e.g. a parameter inside the parameter region, a
  // flatten's output). -1 when the tensor owns its storage.
  int alias_of = -1;
  size_t alias_offset = 0;  // bytes into alias_of
  size_t bytes() const;
};

// What an op does. Each kind is declared in its family's list, src/ops/<family>/<family>_op_kinds.def,
// beside the contract that names its tensors and attributes (<family>_contract.h;
// runtime/op_contract.h says how); the build collects the lists into KILN_OP_KINDS
// (kiln/op_kinds.h, cmake/op_kinds.cmake), which the enum, the names (op_kind_name) and the tests
// that loop over every kind (tests/architecture/op_kinds_test.cpp) all expand.
enum class OpKind : uint8_t {
#define KILN_OP_KIND_ENUM(name) name,
  KILN_OP_KINDS(KILN_OP_KIND_ENUM)
#undef KILN_OP_KIND_ENUM
};
#define KILN_OP_KIND_ONE(name) +1
inline constexpr int kOpKindCount = 0 KILN_OP_KINDS(KILN_OP_KIND_ONE);
#undef KILN_OP_KIND_ONE

const char* op_kind_name(OpKind kind);

// One op of a program, in the generic form its contract is stored in (runtime/op_contract.h
// writes and reads it; nothing else indexes in, out or attrs).
struct Op {
  OpKind kind;
  int layer = -1;  // index into the program's LayerGraph (-1 for update ops)
  std::vector<int> in, out;  // tensor ids; -1 marks an absent optional tensor
  std::vector<double> attrs;  // the contract's attributes
  // On the GPU the op leaves work running on the side stream when it returns (its contract's
  // side_work_outlives_op; compile/op_streams.h places it, in CUDA programs only): that work
  // overlaps the next op, and the memory plan keeps every tensor the op touches alive through the
  // next op, whose end waits for it.
  bool side_work_outlives = false;
};

struct Program {
  CompileOptions options;
  LayerGraph graph;
  std::vector<TensorSpec> tensors;
  std::vector<Op> forward;    // training forward, loss included
  std::vector<Op> backward;
  std::vector<Op> update;
  std::vector<Op> inference;  // eval-mode forward (BN with running stats, no dropout)
  // Mixed precision: CAST params -> params:compute. The update keeps the copies equal to the
  // rounded masters; the Executable runs this list only when the host wrote parameters (or
  // initialized them) since. Empty without compute copies.
  std::vector<Op> refresh_copies;

  int input = -1, label = -1;          // data batch (N,H,W,C), labels (N)
  int loss = -1, logits = -1;          // training outputs
  int inference_logits = -1;           // inference output
  // With a loss: I32 [2] counts of rows whose label ranks first and within the first five
  // (COUNT_CORRECT, ops/loss/totals_slots.h),
  // of the training forward's logits and of the inference logits (last op of inference);
  // labels outside [0, classes) never count. -1 in programs without a loss.
  int train_correct = -1, inference_correct = -1;
  // With a loss: F64 [kTotalsSlots] running totals (ACCUMULATE_TOTALS, ops/loss/loss_contract.h)
  // of the training steps and of the inference batches since the trainer last reset them.
  int train_totals = -1, inference_totals = -1;
  int output_grad = -1;                // programs without a loss: d(output), written by the caller
  int input_grad = -1;                 // with CompileOptions::input_grad: d(input)
  // Parameters, and each optimizer-state slot, are one fp32 (fp64) region in one layout: params[i]
  // at the same element index in each. In mixed precision the parameters the convolutions and
  // GEMMs read come first, and their compute-dtype copies and gradients are the regions
  // params:compute / grads:compute, the same element indices over that prefix; grad_region holds
  // the gradients of the rest, from element 0 (params[i]'s index less the prefix's length). -1
  // where a region would be empty: grad_region when every parameter has a copy, the compute
  // regions without mixed precision.
  int param_region = -1, grad_region = -1;
  int compute_param_region = -1, compute_grad_region = -1;
  std::vector<int> opt_state_regions;  // SGD: [momentum]; AdamW: [m, v]
  std::vector<int> params;             // trainable parameter tensors (views into param_region)
  // The gradient of params[i], `<name>.grad`: a view into compute_grad_region (compute dtype) for
  // a parameter with a compute copy, else into grad_region (the parameter's dtype).
  std::vector<int> grads;
  std::vector<int> buffers;            // BN running statistics, the loss scaler's scale and count
  // Dynamic loss scaling (CompileOptions::loss_scaling), else all -1: the scale (F32 [1]), the
  // clean steps since it last changed (I32 [1]) and whether this step's gradients hold inf/NaN
  // (I32 [1], written by FIND_NONFINITE).
  int loss_scale = -1, loss_scale_clean_steps = -1, found_nonfinite = -1;

  // Where every tensor lives in the one arena (kiln/memory_plan.h), planned by compile(); the
  // Executable allocates and places tensors by it and never plans.
  MemoryPlan memory;

  int find(const std::string& tensor_name) const;  // -1 if absent
  const Layer& layer_of(const Op& op) const { return graph.layers.at(op.layer); }
};

// What torchvision's tables of models count, from a compiled program: its trainable parameters
// (PyTorch's model.parameters(): not BatchNorm's running statistics) and the multiply-adds of one
// image through its convolutions and linear layers (every layer whose attributes hold ConvAttrs or
// LinearAttrs, fused ones included), for `kiln plan` and the zoo's tests.
struct ModelCounts {
  int64_t parameters = 0;
  int64_t multiply_adds = 0;  // per image
};
ModelCounts count_model(const Program& program);

}  // namespace kiln
