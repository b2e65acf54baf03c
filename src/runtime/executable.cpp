#include "kiln/executable.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/random.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

std::byte* allocate_arena(size_t bytes) {
  void* p = std::aligned_alloc(kAlignment, std::max<size_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment));
  if (!p) fail("cannot allocate the {} MiB arena of this program; use a smaller batch", bytes >> 20);
  std::memset(p, 0, bytes);
  return static_cast<std::byte*>(p);
}

void free_arena(std::byte* p) { std::free(p); }

// FNV-1a: a stable per-tensor random stream, independent of declaration order.
uint64_t name_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

template <class T>
void fill_init(const TensorSpec& t, T* data, uint64_t seed) {
  const int64_t n = numel(t.shape);
  const uint64_t stream = name_hash(t.name);
  switch (t.init) {
    case Init::None: return;
    case Init::Zeros: std::fill(data, data + n, T(0)); return;
    case Init::Ones: std::fill(data, data + n, T(1)); return;
    case Init::KaimingNormalFanOut: {  // gain sqrt(2) for ReLU, as torchvision initializes convs
      const double std = std::sqrt(2.0 / double(t.fan_out));
      for (int64_t i = 0; i < n; ++i) data[i] = T(std * random_normal(seed, stream, uint64_t(i)));
      return;
    }
    case Init::UniformFanIn: {  // PyTorch's default for nn.Linear and conv bias
      const double bound = 1.0 / std::sqrt(double(t.fan_in));
      for (int64_t i = 0; i < n; ++i)
        data[i] = T(bound * (2.0 * random_uniform(seed, stream, uint64_t(i)) - 1.0));
      return;
    }
  }
}

}  // namespace

Executable::Executable(Program program, uint64_t seed)
    : program_(std::move(program)), arena_(nullptr, free_arena) {
  if (program_.options.device == Device::CUDA)
    fail("this kiln build has no CUDA backend; use --device cpu (or build on a machine with nvcc and cuDNN)");
  register_cpu_ops();
  plan_ = plan_memory(program_);
  arena_.reset(allocate_arena(plan_.arena_bytes));
  // Resolve every op's kernel up front so a missing kernel fails here, not mid-training.
  for (const auto* list : {&program_.forward, &program_.backward, &program_.update, &program_.inference})
    for (const Op& op : *list) find_op(program_.options.device, op.kind);
  init_state(seed);
}

Executable::~Executable() = default;

void Executable::init_state(uint64_t seed) {
  // Whole regions first (zeroing the gaps between parameters), then the views inside them.
  for (bool views : {false, true}) {
    for (size_t i = 0; i < program_.tensors.size(); ++i) {
      const TensorSpec& t = program_.tensors[i];
      if (t.role == TensorRole::Activation || (t.alias_of >= 0) != views) continue;
      void* data = arena_.get() + plan_.offset[i];
      if (t.dtype == DType::F32) fill_init(t, static_cast<float*>(data), seed);
      if (t.dtype == DType::F64) fill_init(t, static_cast<double*>(data), seed);
    }
  }
}

HostTensor Executable::tensor(int id) {
  if (id < 0 || size_t(id) >= program_.tensors.size()) fail("tensor id {} is out of range", id);
  return {&program_.tensors[id], arena_.get() + plan_.offset[id]};
}

HostTensor Executable::tensor(const std::string& name) {
  const int id = program_.find(name);
  if (id < 0) fail("program has no tensor named '{}' (see `kiln plan` for the names)", name);
  return tensor(id);
}

void Executable::run(const std::vector<Op>& ops, const StepScalars& scalars) {
  auto arg = [&](int id) {
    TensorArg a;
    if (id >= 0) a.spec = &program_.tensors[id], a.data = arena_.get() + plan_.offset[id];
    return a;
  };
  for (const Op& op : ops) {
    OpCall call{op, program_, {}, {}, scalars};
    call.in.reserve(op.in.size());
    call.out.reserve(op.out.size());
    for (int id : op.in) call.in.push_back(arg(id));
    for (int id : op.out) call.out.push_back(arg(id));
    find_op(program_.options.device, op.kind)(call);
  }
}

void Executable::run_forward(const StepScalars& s) { run(program_.forward, s); }
void Executable::run_backward(const StepScalars& s) { run(program_.backward, s); }
void Executable::run_update(const StepScalars& s) { run(program_.update, s); }
void Executable::run_inference(const StepScalars& s) { run(program_.inference, s); }

}  // namespace kiln
