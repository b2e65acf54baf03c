#pragma once
// State shared by the layer lowerings while a LayerGraph becomes a Program: tensor creation,
// each layer's output tensors, and gradient routing (a layer's output gradient is the sum over
// all its consumers, so fan-out gets private gradient tensors and a GRAD_SUM).
#include <any>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "kiln/program.h"
#include "runtime/op_contract.h"

namespace kiln {

class LowerContext {
 public:
  LowerContext(Program& program);

  Program& program;
  DType act_dtype;    // activations (F32, F64, F16, BF16)
  DType param_dtype;  // parameters, master weights, BN statistics (F32 or F64)

  const Layer& layer(int index) const { return program.graph.layers.at(index); }

  int add_tensor(TensorSpec spec);
  int activation(const std::string& name, const Shape& shape, DType dtype);
  int activation(const std::string& name, const Shape& shape) { return activation(name, shape, act_dtype); }
  // A new tensor name with another shape over the same bytes as `of` (flatten and its gradient).
  int view(const std::string& name, const Shape& shape, int of);
  // While a frozen layer is lowered (CompileOptions::freeze), param() makes frozen parameters.
  void set_lowering_frozen(bool frozen) { lowering_frozen_ = frozen; }
  // Trainable parameter (placed in the parameter region by finish()); returns its id. A frozen
  // layer's parameter keeps the role Param (initialized, loaded, checkpointed and refreshing
  // compute copies like any) but joins program.buffers: no gradient, outside the optimizer's region.
  // `compute_copy`: in mixed precision the ops read an fp16/bf16 copy, which the optimizer update
  // keeps equal to the rounded master, and write the gradient in fp16/bf16, the parameter's only
  // gradient (conv and linear weights).
  int param(const std::string& name, const Shape& shape, Init init, int64_t fan_in = 0, int64_t fan_out = 0,
            bool compute_copy = false);
  // The gradient of a parameter: in the compute dtype where it has a copy, else in its own.
  int grad_of(int param_id) const { return grad_of_param_.at(param_id); }
  bool mixed_precision() const { return act_dtype == DType::F16 || act_dtype == DType::BF16; }
  // The tensor ops read for a parameter (its copy, where made); they write its gradient into
  // grad_of (a copied parameter's gradient is in the compute dtype already).
  int compute_param(int param_id) const;
  int buffer(const std::string& name, const Shape& shape, Init init);

  // Forward tensors of a layer's output, training and inference programs.
  int out(int layer) const { return out_.at(layer); }
  int infer_out(int layer) const { return infer_out_.at(layer); }
  int in(int layer, int i) const { return out(this->layer(layer).inputs.at(i)); }
  int infer_in(int layer, int i) const { return infer_out(this->layer(layer).inputs.at(i)); }
  void set_out(int layer, int tensor) { out_[layer] = tensor; }
  void set_infer_out(int layer, int tensor) { infer_out_[layer] = tensor; }

  // Gradients. grad_out: the gradient of `layer`'s output (emits the GRAD_SUM over consumers
  // when there are several). grad_in: the tensor `layer` writes the gradient of input i into;
  // -1 when input i is the data batch (no gradient needed). set_grad_in routes an existing
  // tensor as that gradient instead (add and flatten pass gradients through without copies).
  int grad_out(int layer);
  // The same gradient as at most `at_most` tensors whose sum it is: the consumers' own gradients
  // when there are no more of them than that (no GRAD_SUM; the caller adds them as it reads
  // them), else grad_out's one tensor.
  std::vector<int> grad_out_terms(int layer, size_t at_most);
  int grad_in(int layer, int i);
  void set_grad_in(int layer, int i, int tensor);
  // True when no gradient of input i is wanted: it is the data batch (the first-layer pass,
  // src/compile/passes.cpp, marks such layers unless CompileOptions::input_grad asks for dX), or
  // the output of a frozen layer (mark_frozen).
  bool input_is_data(int layer, int i) const {
    const Layer& l = this->layer(layer);
    const int producer = l.inputs.at(i);
    return l.marks.first_layer && (producer == 0 ? !program.options.input_grad : this->layer(producer).marks.frozen);
  }
  void set_loss_grad(int layer, int tensor) { loss_grad_[layer] = tensor; }

  // Fusion across layers (src/compile/seams.cpp): what a seam's producer leaves its consumers, its
  // convolution's output and the scale and shift they apply to it (relu(conv_out * scale + shift)).
  struct SeamOutput {
    int conv_out = -1, scale = -1, shift = -1;
  };
  void set_seam_output(int layer, SeamOutput s) { seam_output_[layer] = s; }
  const SeamOutput& seam_output(int layer) const {
    auto it = seam_output_.find(layer);
    if (it == seam_output_.end())
      fail("internal: layer '{}' is marked as a seam's producer but left no seam output", this->layer(layer).name);
    return it->second;
  }

  // Emit ops: make_op(contract, layer) of the op's contract (runtime/op_contract.h).
  void forward(Op op) { program.forward.push_back(std::move(op)); }
  void backward(Op op) { program.backward.push_back(std::move(op)); }
  // Removes and returns the backward op of `kind` that writes `tensor`, where one was emitted: a
  // layer whose backward takes over a reader's (conv_bn_act folds a squeeze-and-excitation block's).
  std::optional<Op> take_backward_op(OpKind kind, int tensor);
  // The backward op of `kind` that writes `tensor`, or nullptr: for such a layer to rewrite in place.
  Op* backward_op_writing(OpKind kind, int tensor);
  void inference(Op op) { program.inference.push_back(std::move(op)); }

  // Forward -> backward: a layer's forward lowering saves what its backward needs (its forward
  // op's contract, say) and the backward lowering gets that value back, typed.
  template <class Saved>
  void save(int layer, Saved value) {
    saved_[layer] = std::move(value);
  }
  template <class Saved>
  const Saved& saved(int layer) const {
    auto it = saved_.find(layer);
    const Saved* value = it == saved_.end() ? nullptr : std::any_cast<Saved>(&it->second);
    if (!value) fail("internal: layer '{}' saved nothing of this type for its backward", this->layer(layer).name);
    return *value;
  }

  // After the last layer's backward: lays out the parameter and gradient regions (every
  // parameter a view of Program::param_region, in one order that the gradients and each state
  // region of the optimizer share, so a fused update walks them all with one index).
  void lay_out_parameters();
  // The optimizer's (optimizer_family.h): a state region named `name` of the parameters' layout,
  // zeros at first, checkpointed (Program::opt_state_regions). After lay_out_parameters.
  int optimizer_state(const std::string& name);
  void update(Op op) { program.update.push_back(std::move(op)); }

 private:
  std::vector<int> consumer_gradients(int layer) const;  // each consumer's gradient of layer's output
  int frozen_param(const std::string& name, const Shape& shape, Init init, int64_t fan_in, int64_t fan_out,
                   bool compute_copy);
  bool lowering_frozen_ = false;
  std::map<int, int> out_, infer_out_, loss_grad_, grad_total_;
  std::map<std::pair<int, int>, int> grad_slot_;  // (consumer layer, input index) -> tensor
  std::map<int, int> grad_of_param_;
  std::map<int, int> compute_param_;                 // param id -> its fp16/bf16 copy
  std::map<int, std::any> saved_;                    // layer -> what its forward saved
  std::map<int, SeamOutput> seam_output_;            // seam producer -> what its consumers apply
  std::vector<std::vector<std::pair<int, int>>> consumers_;  // per layer: (consumer, input index)
  int64_t param_elements_ = -1;  // of the parameter layout, once laid out
};

}  // namespace kiln
