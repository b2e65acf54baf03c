#include "compile/lower_context.h"

#include <algorithm>

#include "compile/compiler_ops.h"
#include "kiln/error.h"
#include "kiln/memory_plan.h"

namespace kiln {

namespace {
DType activation_dtype(Precision p) {
  switch (p) {
    case Precision::FP32: return DType::F32;
    case Precision::FP64: return DType::F64;
    case Precision::FP16: return DType::F16;
    case Precision::BF16: return DType::BF16;
  }
  return DType::F32;
}
size_t align_up(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }
}  // namespace

LowerContext::LowerContext(Program& p)
    : program(p),
      act_dtype(activation_dtype(p.options.precision)),
      param_dtype(p.options.precision == Precision::FP64 ? DType::F64 : DType::F32) {
  consumers_.resize(p.graph.layers.size());
  for (size_t c = 0; c < p.graph.layers.size(); ++c) {
    const auto& inputs = p.graph.layers[c].inputs;
    for (size_t i = 0; i < inputs.size(); ++i) consumers_[inputs[i]].push_back({int(c), int(i)});
  }
}

int LowerContext::add_tensor(TensorSpec spec) {
  if (program.find(spec.name) >= 0) fail("internal: tensor '{}' declared twice", spec.name);
  program.tensors.push_back(std::move(spec));
  return int(program.tensors.size()) - 1;
}

int LowerContext::activation(const std::string& name, const Shape& shape, DType dtype) {
  TensorSpec t;
  t.name = name, t.shape = shape, t.dtype = dtype, t.role = TensorRole::Activation;
  return add_tensor(std::move(t));
}

int LowerContext::view(const std::string& name, const Shape& shape, int of) {
  const TensorSpec& base = program.tensors.at(of);
  if (numel(shape) != numel(base.shape))
    fail("internal: view '{}' {} does not match '{}' {}", name, shape_str(shape), base.name,
         shape_str(base.shape));
  TensorSpec t = base;
  t.name = name, t.shape = shape, t.alias_of = of, t.alias_offset = 0, t.init = Init::None;
  return add_tensor(std::move(t));
}

int LowerContext::param(const std::string& name, const Shape& shape, Init init, int64_t fan_in,
                        int64_t fan_out, bool compute_copy) {
  if (lowering_frozen_) return frozen_param(name, shape, init, fan_in, fan_out, compute_copy);
  TensorSpec t;
  t.name = name, t.shape = shape, t.dtype = param_dtype, t.role = TensorRole::Param;
  t.init = init, t.fan_in = fan_in, t.fan_out = fan_out;
  int id = add_tensor(t);
  const bool copied = compute_copy && mixed_precision();
  // A copied parameter's gradient is the compute-dtype tensor the ops write: the optimizer reads
  // it as it is, so no fp32 gradient exists beside it.
  TensorSpec g;
  g.name = name + ".grad", g.shape = shape;
  g.dtype = copied ? act_dtype : param_dtype, g.role = copied ? TensorRole::ComputeGrad : TensorRole::Grad;
  int gid = add_tensor(std::move(g));
  program.params.push_back(id);
  program.grads.push_back(gid);
  grad_of_param_[id] = gid;
  if (copied) {
    TensorSpec c;
    c.name = name + ":compute", c.shape = shape, c.dtype = act_dtype, c.role = TensorRole::ComputeParam;
    compute_param_[id] = add_tensor(std::move(c));
  }
  return id;
}

int LowerContext::frozen_param(const std::string& name, const Shape& shape, Init init, int64_t fan_in,
                               int64_t fan_out, bool compute_copy) {
  TensorSpec t;
  t.name = name, t.shape = shape, t.dtype = param_dtype, t.role = TensorRole::Param;
  t.init = init, t.fan_in = fan_in, t.fan_out = fan_out;
  const int id = add_tensor(t);
  program.buffers.push_back(id);
  if (compute_copy && mixed_precision()) {
    // Its own copy, outside the region the update rewrites: refreshed with the region's copies
    // whenever the host writes parameters.
    TensorSpec c;
    c.name = name + ":compute", c.shape = shape, c.dtype = act_dtype, c.role = TensorRole::ComputeParam;
    const int copy = add_tensor(std::move(c));
    compute_param_[id] = copy;
    program.refresh_copies.push_back(copy_cast_op(id, copy));
  }
  return id;
}

int LowerContext::compute_param(int param_id) const {
  auto it = compute_param_.find(param_id);
  return it == compute_param_.end() ? param_id : it->second;
}

int LowerContext::buffer(const std::string& name, const Shape& shape, Init init) {
  TensorSpec t;
  t.name = name, t.shape = shape, t.dtype = param_dtype, t.role = TensorRole::Buffer, t.init = init;
  int id = add_tensor(std::move(t));
  program.buffers.push_back(id);
  return id;
}

int LowerContext::grad_in(int layer, int i) {
  if (input_is_data(layer, i)) return -1;
  const int producer = this->layer(layer).inputs.at(i);
  const TensorSpec& fwd = program.tensors.at(out(producer));
  if (consumers_.at(producer).size() == 1) {
    auto it = grad_total_.find(producer);
    if (it != grad_total_.end()) return it->second;
    return grad_total_[producer] = activation("d:" + this->layer(producer).name, fwd.shape, fwd.dtype);
  }
  auto key = std::make_pair(layer, i);
  auto it = grad_slot_.find(key);
  if (it != grad_slot_.end()) return it->second;
  return grad_slot_[key] = activation(
             "d:" + this->layer(producer).name + "@" + this->layer(layer).name + "." + std::to_string(i),
             fwd.shape, fwd.dtype);
}

void LowerContext::set_grad_in(int layer, int i, int tensor) {
  if (input_is_data(layer, i)) return;
  const int producer = this->layer(layer).inputs.at(i);
  if (consumers_.at(producer).size() == 1) {
    grad_total_[producer] = tensor;
  } else {
    grad_slot_[{layer, i}] = tensor;
  }
}

std::vector<int> LowerContext::consumer_gradients(int layer) const {
  const auto& consumers = consumers_.at(layer);
  if (consumers.size() < 2)
    fail("internal: layer '{}' has no gradient (it feeds nothing that is trained)", this->layer(layer).name);
  std::vector<int> parts;
  for (const auto& key : consumers) {
    auto it = grad_slot_.find(key);
    if (it == grad_slot_.end())
      fail("internal: consumer '{}' of '{}' produced no gradient", this->layer(key.first).name,
           this->layer(layer).name);
    parts.push_back(it->second);
  }
  return parts;
}

std::vector<int> LowerContext::grad_out_terms(int layer, size_t at_most) {
  const bool one_tensor = loss_grad_.count(layer) || grad_total_.count(layer);
  if (!one_tensor && consumers_.at(layer).size() <= at_most) return consumer_gradients(layer);
  return {grad_out(layer)};
}

Op* LowerContext::backward_op_writing(OpKind kind, int tensor) {
  auto& ops = program.backward;
  auto it = std::find_if(ops.begin(), ops.end(), [&](const Op& op) {
    return op.kind == kind && std::find(op.out.begin(), op.out.end(), tensor) != op.out.end();
  });
  return it == ops.end() ? nullptr : &*it;
}

std::optional<Op> LowerContext::take_backward_op(OpKind kind, int tensor) {
  Op* found = backward_op_writing(kind, tensor);
  if (!found) return std::nullopt;
  Op op = std::move(*found);
  program.backward.erase(program.backward.begin() + (found - program.backward.data()));
  return op;
}

int LowerContext::grad_out(int layer) {
  if (auto it = loss_grad_.find(layer); it != loss_grad_.end()) return it->second;
  if (auto it = grad_total_.find(layer); it != grad_total_.end()) return it->second;
  const std::vector<int> parts = consumer_gradients(layer);
  const TensorSpec& fwd = program.tensors.at(out(layer));
  int total = activation("d:" + this->layer(layer).name, fwd.shape, fwd.dtype);
  backward(gradient_sum_op(std::vector<TensorId>(parts.begin(), parts.end()), total, layer));
  return grad_total_[layer] = total;
}

void LowerContext::lay_out_parameters() {
  // Parameters and each optimizer-state slot share one layout, so a fused update walks all of
  // them as flat arrays with the same index. Parameters with compute copies come first: their
  // copies and gradients (compute dtype) are then one prefix of that index range, and the fp32
  // gradient region holds the rest, starting at element 0.
  std::stable_partition(program.params.begin(), program.params.end(),
                        [&](int id) { return compute_param_.count(id) > 0; });
  for (size_t i = 0; i < program.params.size(); ++i) program.grads[i] = grad_of(program.params[i]);
  size_t offset = 0, copied_elements = 0;
  const size_t elem = dtype_size(param_dtype);
  for (int id : program.params) {
    TensorSpec& p = program.tensors[id];
    p.alias_offset = offset;
    if (compute_param_.count(id)) {
      const size_t at = offset / elem * dtype_size(act_dtype);  // same element index
      program.tensors[compute_param_[id]].alias_offset = at;
      program.tensors[grad_of(id)].alias_offset = at;
    } else {
      program.tensors[grad_of(id)].alias_offset = offset - copied_elements * elem;
    }
    offset += align_up(p.bytes());
    if (compute_param_.count(id)) copied_elements = offset / elem;
  }
  // The CUDA update and FIND_NONFINITE handle 8 elements per thread, none straddling the end of
  // the prefix (every parameter is 256-byte aligned, so this holds by construction).
  if (copied_elements % 8 != 0)
    fail("internal: the parameters with compute copies end at element {}, not a multiple of 8", copied_elements);
  const int64_t count = int64_t(offset / elem);
  param_elements_ = count;
  auto region = [&](const std::string& name, TensorRole role, DType dtype, int64_t n) {
    TensorSpec t;
    t.name = name, t.shape = {n}, t.dtype = dtype, t.role = role, t.init = Init::Zeros;
    return add_tensor(std::move(t));
  };
  program.param_region = region("params", TensorRole::Param, param_dtype, count);
  // Absent only when every parameter has a copy; without copies it exists even when empty.
  if (copied_elements == 0 || count > int64_t(copied_elements))
    program.grad_region = region("grads", TensorRole::Grad, param_dtype, count - int64_t(copied_elements));
  if (copied_elements > 0) {
    program.compute_param_region = region("params:compute", TensorRole::ComputeParam, act_dtype, int64_t(copied_elements));
    program.compute_grad_region = region("grads:compute", TensorRole::ComputeGrad, act_dtype, int64_t(copied_elements));
    // The copies change only when the masters do: in the update, which rewrites them, or when
    // the host writes parameters, after which the Executable runs this list.
    program.refresh_copies.push_back(copy_cast_op(program.param_region, program.compute_param_region));
  }
  for (int id : program.params) {
    program.tensors[id].alias_of = program.param_region;
    const bool copied = compute_param_.count(id) > 0;
    program.tensors[grad_of(id)].alias_of = copied ? program.compute_grad_region : program.grad_region;
    if (copied) program.tensors[compute_param_[id]].alias_of = program.compute_param_region;
  }
}

int LowerContext::optimizer_state(const std::string& name) {
  if (param_elements_ < 0) fail("internal: optimizer state '{}' declared before the parameters were laid out", name);
  TensorSpec t;
  t.name = name, t.shape = {param_elements_}, t.dtype = param_dtype, t.role = TensorRole::OptState;
  t.init = Init::Zeros;
  const int id = add_tensor(std::move(t));
  program.opt_state_regions.push_back(id);
  return id;
}

}  // namespace kiln
