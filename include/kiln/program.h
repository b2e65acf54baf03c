#pragma once
// A compiled Program: every tensor the run needs (with dtype, shape and role) and the op lists
// for forward (training), backward, update and inference. Ops name tensors by index.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/layer_graph.h"
#include "kiln/options.h"

namespace kiln {

enum class TensorRole : uint8_t {
  Input,       // data batch (persistent, written by the trainer)
  Label,       // int32 labels (persistent)
  Output,      // read by the trainer after a step: loss, logits (persistent)
  Param,       // trainable parameters (one contiguous region)
  Grad,        // their gradients (one contiguous region, same order)
  OptState,    // optimizer state (contiguous, same order per slot)
  Buffer,      // non-trainable state: BN running statistics
  ComputeParam,  // mixed precision: fp16/bf16 copies of weights the convolutions read (contiguous)
  ComputeGrad,   // mixed precision: their fp16/bf16 gradients, cast into Grad after backward
  OutputGrad,    // programs without a loss: the gradient of the output, written by the caller
  Activation,    // everything with a lifetime inside one step
};

enum class Init : uint8_t { None, Zeros, Ones, KaimingNormalFanOut, UniformFanIn };

struct TensorSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
  TensorRole role = TensorRole::Activation;
  Init init = Init::None;
  int64_t fan_in = 0, fan_out = 0;  // for initializers
  // A view of another tensor's storage (e.g. a parameter inside the parameter region, a
  // flatten's output). -1 when the tensor owns its storage.
  int alias_of = -1;
  size_t alias_offset = 0;  // bytes into alias_of
  size_t bytes() const;
};

enum class OpKind : uint8_t {
  CONV_FWD,       // in: x, w, [b]                    out: y
  CONV_DGRAD,     // in: dy, w                        out: dx
  CONV_WGRAD,     // in: dy, x                        out: dw, [db]
  BN_FWD_TRAIN,   // in: x, gamma, beta               out: y, saved_mean, saved_inv_std, running_mean, running_var (updated in place)
  BN_BWD,         // in: dy, x, gamma, saved_mean, saved_inv_std   out: dx, dgamma, dbeta
  BN_INF,         // in: x, gamma, beta, running_mean, running_var out: y
  RELU_FWD,       // in: x                            out: y, mask (u8 per element)
  RELU_BWD,       // in: dy, mask                     out: dx
  RELU_INF,       // in: x                            out: y
  CBR_FWD,        // in: x, w, gamma, beta            out: conv_out, y, saved_mean, saved_inv_std, bitmask (u8, 8 per byte), running_mean, running_var
  CBR_BWD,        // in: dy, bitmask, conv_out, x, w, gamma, saved_mean, saved_inv_std  out: dx, dw, dgamma, dbeta, dconv (workspace)
  CBR_BWD_FIRST,  // as CBR_BWD with out[0] = -1: no dX for the network's first layer
  CBR_INF,        // in: x, w, gamma, beta, running_mean, running_var  out: y
  MAXPOOL_FWD,    // in: x                            out: y, argmax (i32)
  MAXPOOL_BWD,    // in: dy, argmax                   out: dx
  MAXPOOL_INF,    // in: x                            out: y
  AVGPOOL_FWD,    // in: x                            out: y   (count_include_pad as PyTorch's default)
  AVGPOOL_BWD,    // in: dy                           out: dx
  GAP_FWD,        // in: x                            out: y (N, C)
  GAP_BWD,        // in: dy                           out: dx
  LINEAR_FWD,     // in: x (N, F), w (O, F), [b]      out: y (N, O)
  LINEAR_BWD,     // in: dy, x, w                     out: [dx], dw, [db]
  DROPOUT_FWD,    // in: x                            out: y, mask (u8)  (inverted dropout)
  DROPOUT_BWD,    // in: dy, mask                     out: dx
  ADD_FWD,        // in: a, b                         out: y
  GRAD_SUM,       // in: g0, g1, ...                  out: sum
  SOFTMAX_CE,     // in: logits, labels (i32)         out: loss (f32[1], mean over batch), dlogits
  CAST,           // in: src                          out: dst   (first min(numel) elements, dtype conversion)
  SGD_UPDATE,     // in: grads                        out: params, momentum   (whole regions)
  ADAMW_UPDATE,   // in: grads                        out: params, m, v       (whole regions)
};

const char* op_kind_name(OpKind kind);

struct Op {
  OpKind kind;
  int layer = -1;  // index into the program's LayerGraph (-1 for update ops)
  std::vector<int> in, out;  // tensor ids; -1 marks an absent optional tensor
  LayerAttrs attrs;
};

struct Program {
  CompileOptions options;
  LayerGraph graph;
  std::vector<TensorSpec> tensors;
  std::vector<Op> forward;    // training forward, loss included
  std::vector<Op> backward;
  std::vector<Op> update;
  std::vector<Op> inference;  // eval-mode forward (BN with running stats, no dropout)

  int input = -1, label = -1;          // data batch (N,H,W,C), labels (N)
  int loss = -1, logits = -1;          // training outputs
  int inference_logits = -1;           // inference output
  int output_grad = -1;                // programs without a loss: d(output), written by the caller
  int input_grad = -1;                 // with CompileOptions::input_grad: d(input)
  int param_region = -1, grad_region = -1;
  int compute_param_region = -1, compute_grad_region = -1;  // mixed precision only
  std::vector<int> opt_state_regions;  // SGD: [momentum]; AdamW: [m, v]
  std::vector<int> params;             // trainable parameter tensors (views into param_region)
  std::vector<int> grads;              // gradient of params[i] (views into grad_region)
  std::vector<int> buffers;            // BN running statistics

  int find(const std::string& tensor_name) const;  // -1 if absent
  const Layer& layer_of(const Op& op) const { return graph.layers.at(op.layer); }
};

}  // namespace kiln
