#include "compile/lower_context.h"

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
                        int64_t fan_out) {
  TensorSpec t;
  t.name = name, t.shape = shape, t.dtype = param_dtype, t.role = TensorRole::Param;
  t.init = init, t.fan_in = fan_in, t.fan_out = fan_out;
  int id = add_tensor(t);
  TensorSpec g;
  g.name = name + ".grad", g.shape = shape, g.dtype = param_dtype, g.role = TensorRole::Grad;
  int gid = add_tensor(std::move(g));
  program.params.push_back(id);
  program.grads.push_back(gid);
  grad_of_param_[id] = gid;
  return id;
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

int LowerContext::grad_out(int layer) {
  if (auto it = loss_grad_.find(layer); it != loss_grad_.end()) return it->second;
  if (auto it = grad_total_.find(layer); it != grad_total_.end()) return it->second;
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
  const TensorSpec& fwd = program.tensors.at(out(layer));
  int total = activation("d:" + this->layer(layer).name, fwd.shape, fwd.dtype);
  backward(op(OpKind::GRAD_SUM, layer, parts, {total}));
  return grad_total_[layer] = total;
}

Op LowerContext::op(OpKind kind, int layer, std::vector<int> in, std::vector<int> out) const {
  Op o;
  o.kind = kind, o.layer = layer, o.in = std::move(in), o.out = std::move(out);
  if (layer >= 0) o.attrs = this->layer(layer).attrs;
  return o;
}

void LowerContext::finish() {
  // Parameters, gradients and each optimizer-state slot share one layout, so a fused update
  // walks all of them as flat arrays with the same index.
  size_t offset = 0;
  for (int id : program.params) {
    TensorSpec& p = program.tensors[id];
    p.alias_offset = offset;
    program.tensors[grad_of(id)].alias_offset = offset;
    offset += align_up(p.bytes());
  }
  const int64_t count = int64_t(offset / dtype_size(param_dtype));
  auto region = [&](const std::string& name, TensorRole role, Init init) {
    TensorSpec t;
    t.name = name, t.shape = {count}, t.dtype = param_dtype, t.role = role, t.init = init;
    return add_tensor(std::move(t));
  };
  program.param_region = region("params", TensorRole::Param, Init::Zeros);
  program.grad_region = region("grads", TensorRole::Grad, Init::Zeros);
  for (int id : program.params) {
    program.tensors[id].alias_of = program.param_region;
    program.tensors[grad_of(id)].alias_of = program.grad_region;
  }
  const OptimizerConfig& opt = program.options.optimizer;
  Op update;
  update.layer = -1;
  update.in = {program.grad_region};
  update.out = {program.param_region};
  if (opt.kind == OptimizerKind::SGD) {
    update.kind = OpKind::SGD_UPDATE;
    program.opt_state_regions = {region("optimizer.momentum_buffer", TensorRole::OptState, Init::Zeros)};
  } else {
    update.kind = OpKind::ADAMW_UPDATE;
    program.opt_state_regions = {region("optimizer.exp_avg", TensorRole::OptState, Init::Zeros),
                                 region("optimizer.exp_avg_sq", TensorRole::OptState, Init::Zeros)};
  }
  for (int r : program.opt_state_regions) update.out.push_back(r);
  program.update.push_back(std::move(update));
}

}  // namespace kiln
