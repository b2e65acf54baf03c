#include "kiln/executable.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/half_bits.h"
#include "kiln/data_parallel.h"
#include "runtime/backend.h"
#include "runtime/gradient_buckets.h"
#include "runtime/initializers.h"
#include "runtime/op_call.h"
#include "runtime/prepare_progress.h"

namespace kiln {

Executable::Executable(Program program, uint64_t seed) : program_(std::move(program)) {
  using Clock = std::chrono::steady_clock;
  auto lap = [t = Clock::now()]() mutable {  // seconds since the last lap
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - t).count();
    t = now;
    return seconds;
  };
  if (program_.options.device == Device::CUDA) {
    backend_ = make_cuda_backend(program_.options.device_index, program_.options.cuda);
    register_cuda_ops();
  } else {
    backend_ = make_cpu_backend(program_.options.cpu);
    register_cpu_ops();
  }
  const MemoryPlan& plan = program_.memory;
  if (plan.offset.size() != program_.tensors.size() || plan.lifetime.size() != program_.tensors.size())
    fail("the program's memory plan covers {} of its {} tensors: run the Executable on a Program as compile() "
         "returns it, or plan a changed one again (program.memory = plan_memory(program))",
         plan.offset.size(), program_.tensors.size());
  start_seconds_.backend = lap();
  plan_rank_averages();
  arena_ = backend_->allocate(plan.arena_bytes);
  for (RankAverage& a : rank_averages_) a.data = arena_ + reinterpret_cast<size_t>(a.data);
  start_seconds_.allocate = lap();
  init_state(seed);
  start_seconds_.init_state = lap();
  prepare_ops();
  start_seconds_.prepare_ops = lap();
}

Executable::~Executable() {
  if (backend_ && arena_) {
    try {
      backend_->synchronize();
    } catch (...) {  // a failed step already reported its error; still free the memory
    }
    backend_->release(arena_);
  }
}

// Offsets into the arena until it is allocated (the constructor then adds its address).
void Executable::plan_rank_averages() {
  const ProcessGroup* group = program_.options.data_parallel.get();
  if (!group) return;
  if (program_.options.device == Device::CUDA && group->device() != program_.options.device_index)
    fail("this rank's process group is on GPU {} but the program was compiled for GPU {}; compile it for the "
         "rank's GPU (CompileOptions::device_index = RankEnv::device)", group->device(),
         program_.options.device_index);
  for (const GradientBucket& b : plan_gradient_buckets(program_))
    rank_averages_.push_back({reinterpret_cast<void*>(program_.memory.offset[size_t(b.region)] + b.offset), b.count,
                              b.dtype, b.ready_after});
}

void Executable::broadcast_state_from_rank0(bool buffers_only) {
  ProcessGroup* group = program_.options.data_parallel.get();
  if (!group) return;
  backend_->activate();
  std::vector<int> ids = program_.buffers;
  if (!buffers_only) {
    ids.push_back(program_.param_region);
    ids.insert(ids.end(), program_.opt_state_regions.begin(), program_.opt_state_regions.end());
    copies_stale_ = true;  // the compute copies are made again from the masters rank 0 sent
  }
  for (int id : ids)
    backend_->broadcast_over_ranks(*group, arena_ + program_.memory.offset[size_t(id)], program_.tensors[size_t(id)].bytes(), 0);
}

// Resolves every op's kernel up front, so a missing kernel or an unsupported cuDNN graph fails
// here, not mid-training, and lets ops build plans and size their workspace once.
void Executable::prepare_ops() {
  const StepScalars zero{};
  backend_->activate();
  const auto lists = {&program_.refresh_copies, &program_.forward, &program_.backward, &program_.update,
                      &program_.inference};
  int total = 0, done = 0;
  for (const auto* list : lists) total += static_cast<int>(list->size());
  PrepareProgress progress = PrepareProgress::to_stderr(total);
  const PrepareProgress::Detail status = [this] { return backend_->prepare_status(); };
  for (const auto* list : lists) {
    for (const Op& op : *list) {
      find_op(program_.options.device, op.kind);
      if (PrepareFn prepare = find_prepare(program_.options.device, op.kind)) prepare(bind(op, zero));
      progress.op_done(++done, status);
    }
  }
  backend_->finish_prepare();
  progress.finish(status);
}

OpCall Executable::bind(const Op& op, const StepScalars& scalars) {
  auto arg = [&](int id) {
    TensorArg a;
    if (id >= 0) a.spec = &program_.tensors[id], a.data = arena_ + program_.memory.offset[id];
    return a;
  };
  OpCall call{op, program_, {}, {}, scalars, backend_.get(), backend_->device_scalars()};
  call.in.reserve(op.in.size());
  call.out.reserve(op.out.size());
  for (int id : op.in) call.in.push_back(arg(id));
  for (int id : op.out) call.out.push_back(arg(id));
  return call;
}

void Executable::init_state(uint64_t seed) {
  // Whole regions first (zeroing the gaps between parameters), then the views inside them. Zeros
  // are written in place and other values through one host buffer: VGG16-BN's parameter and
  // momentum regions are 0.55 GB each, and a buffer and a copy per tensor cost seconds of its start.
  std::vector<std::byte> host;
  for (bool views : {false, true}) {
    for (size_t i = 0; i < program_.tensors.size(); ++i) {
      const TensorSpec& t = program_.tensors[i];
      if (t.role == TensorRole::Activation || t.init == Init::None || (t.alias_of >= 0) != views) continue;
      std::byte* memory = arena_ + program_.memory.offset[i];
      if (initial_values_are_zeros(t)) {
        backend_->zero(memory, t.bytes());
        continue;
      }
      host.resize(t.bytes());
      if (initial_values(t, seed, host.data())) backend_->copy_in(memory, host.data(), t.bytes());
    }
  }
  copies_stale_ = true;
}

HostTensor Executable::tensor(int id) {
  if (id < 0 || size_t(id) >= program_.tensors.size()) fail("tensor id {} is out of range", id);
  if (backend_->device() != Device::CPU)
    fail("tensor '{}' lives on the GPU; use Executable::read/write to copy it", program_.tensors[id].name);
  return {&program_.tensors[id], arena_ + program_.memory.offset[id]};
}

HostTensor Executable::tensor(const std::string& name) { return tensor(id(name)); }

int Executable::id(const std::string& name) const {
  const int id = program_.find(name);
  if (id < 0) fail("program has no tensor named '{}' (see `kiln plan` for the names)", name);
  return id;
}

// The memory of tensor `id` for a copy of `bytes` bytes, which must be the tensor's size.
std::byte* Executable::memory_for_copy(int id, size_t bytes, const char* copy) const {
  const TensorSpec& t = program_.tensors.at(id);
  if (bytes != t.bytes()) fail("{} {} bytes: tensor '{}' holds {} bytes", copy, bytes, t.name, t.bytes());
  return arena_ + program_.memory.offset[id];
}

// A parameter, the parameter region, or a view of either: what the compute copies are made of.
bool Executable::writes_parameters(int id) const {
  for (int t = id; t >= 0; t = program_.tensors[t].alias_of)
    if (program_.tensors[t].role == TensorRole::Param) return true;
  return false;
}

void Executable::write(int id, const void* host, size_t bytes) {
  backend_->copy_in(memory_for_copy(id, bytes, "writing"), host, bytes);
  if (writes_parameters(id)) copies_stale_ = true;
}

void Executable::write_ordered(int id, const void* host, size_t bytes) {
  backend_->copy_in_ordered(memory_for_copy(id, bytes, "writing"), host, bytes);
  if (writes_parameters(id)) copies_stale_ = true;
}

namespace {

// The per-channel affine map for pixels written to tensor `t`, checked.
PixelNormalization pixel_normalization(const TensorSpec& t, size_t count, const std::vector<float>& scale,
                                       const std::vector<float>& bias) {
  if (t.dtype != DType::F32)
    fail("tensor '{}' is {}; normalized pixels are written to F32 tensors only", t.name, dtype_name(t.dtype));
  PixelNormalization n;
  n.channels = int(scale.size());
  if (n.channels < 1 || n.channels > PixelNormalization::kMaxChannels || bias.size() != scale.size() ||
      count % size_t(n.channels) != 0)
    fail("writing pixels to '{}': {} scales and {} biases for {} values; give one scale and bias per channel "
         "(1 to {} channels)", t.name, scale.size(), bias.size(), count, PixelNormalization::kMaxChannels);
  for (int c = 0; c < n.channels; ++c) n.scale[c] = scale[c], n.bias[c] = bias[c];
  return n;
}

}  // namespace

void Executable::write_pixels_ordered(int id, const uint8_t* pixels, size_t count, const std::vector<float>& scale,
                                      const std::vector<float>& bias) {
  const PixelNormalization n = pixel_normalization(program_.tensors.at(size_t(id)), count, scale, bias);
  float* dst = reinterpret_cast<float*>(memory_for_copy(id, count * sizeof(float), "writing"));
  backend_->normalize_in_ordered(dst, pixels, int64_t(count), n);
  if (writes_parameters(id)) copies_stale_ = true;
}

void Executable::write_device_pixels_ordered(int id, DevicePixels& pixels, size_t count,
                                             const std::vector<float>& scale, const std::vector<float>& bias) {
  const PixelNormalization n = pixel_normalization(program_.tensors.at(size_t(id)), count, scale, bias);
  float* dst = reinterpret_cast<float*>(memory_for_copy(id, count * sizeof(float), "writing"));
  backend_->normalize_device_pixels_ordered(dst, pixels, int64_t(count), n);
  if (writes_parameters(id)) copies_stale_ = true;
}

void Executable::read(int id, void* host, size_t bytes) {
  backend_->copy_out(host, memory_for_copy(id, bytes, "reading"), bytes);
}

void Executable::read_many(const std::vector<int>& ids, std::vector<std::vector<std::byte>>& reads) {
  reads.resize(ids.size());
  std::vector<Backend::CopyOut> copies;
  copies.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    reads[i].resize(program_.tensors.at(ids[i]).bytes());
    copies.push_back({reads[i].data(), memory_for_copy(ids[i], reads[i].size(), "reading"), reads[i].size()});
  }
  backend_->copy_out_many(copies);
}

std::vector<double> Executable::gradient(const std::string& param) {
  const int param_id = program_.find(param);
  size_t i = 0;
  while (i < program_.params.size() && program_.params[i] != param_id) ++i;
  if (param_id < 0 || i == program_.params.size())
    fail("'{}' is not a trainable parameter of this program, so it has no gradient{}", param,
         program_.params.empty() ? std::string()
                                 : fmt::format(" (parameters are named as '{}')",
                                               program_.tensors[program_.params.front()].name));
  const TensorSpec& g = program_.tensors[program_.grads[i]];
  std::vector<std::byte> bytes(g.bytes());
  read(program_.grads[i], bytes.data(), bytes.size());
  // With loss scaling the backward wrote gradients times the scale (the optimizer divides it out).
  double unscale = 1;
  if (program_.loss_scale >= 0) {
    float scale = 0;
    read(program_.loss_scale, &scale, sizeof scale);
    unscale = 1.0 / scale;
  }
  const size_t n = size_t(numel(g.shape)), size = dtype_size(g.dtype);
  std::vector<double> out(n);
  for (size_t k = 0; k < n; ++k) {
    const std::byte* p = bytes.data() + k * size;
    double v = 0;
    if (g.dtype == DType::F32) {
      float f;
      std::memcpy(&f, p, sizeof f);
      v = f;
    } else if (g.dtype == DType::F64) {
      std::memcpy(&v, p, sizeof v);
    } else {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      v = g.dtype == DType::F16 ? half_bits_to_double(h) : bf16_bits_to_double(h);
    }
    out[k] = v * unscale;
  }
  return out;
}

void Executable::synchronize() { backend_->synchronize(); }

size_t Executable::workspace_bytes() const { return backend_->workspace_total_bytes(); }

void Executable::run_op(const Op& op, const StepScalars& scalars) {
  const OpScratchScope lend(backend_->op_scratch());  // the CPU's workspace, for this op's kernels
  backend_->before_op(op);
  find_op(program_.options.device, op.kind)(bind(op, scalars));
  backend_->after_op();
}

void Executable::run(const std::vector<Op>& ops, const StepScalars& scalars) { run_lists({&ops}, scalars); }

void Executable::run_lists(std::initializer_list<const std::vector<Op>*> lists, const StepScalars& scalars) {
  backend_->activate();
  backend_->stage_scalars(scalars);
  for (const auto* ops : lists) {
    if (ops == &program_.backward && !rank_averages_.empty()) {
      run_backward_averaged(scalars);
      continue;
    }
    for (const Op& op : *ops) run_op(op, scalars);
    backend_->after_ops();
  }
}

// The backward with each bucket of gradients averaged over the ranks once its last op is issued;
// the list's end waits for every average, so the update reads averaged gradients.
void Executable::run_backward_averaged(const StepScalars& scalars) {
  ProcessGroup& group = *program_.options.data_parallel;
  size_t next = 0;
  // Issues the averages ready once backward op `k` is (every one left, at the list's end).
  auto average_ready = [&](int k) {
    for (; next < rank_averages_.size() && (k < 0 || rank_averages_[next].after_op == k); ++next) {
      const RankAverage& a = rank_averages_[next];
      backend_->average_over_ranks(group, a.data, a.count, a.dtype);
    }
  };
  for (size_t k = 0; k < program_.backward.size(); ++k) {
    run_op(program_.backward[k], scalars);
    average_ready(int(k));
  }
  average_ready(-1);  // a program whose backward is empty
  backend_->after_ops();
  backend_->join_rank_averages();
}

void Executable::refresh_copies_if_stale(const StepScalars& scalars) {
  if (!copies_stale_) return;
  // Before any capture or replay: a graph holds only the step, which keeps the copies current.
  if (!program_.refresh_copies.empty()) run(program_.refresh_copies, scalars);
  copies_stale_ = false;
}

void Executable::run_graph(int graph, std::initializer_list<const std::vector<Op>*> lists,
                           const StepScalars& scalars) {
  const int runs = graph_runs_[graph]++;
  if (!backend_->can_capture() || runs == 0) {
    run_lists(lists, scalars);
    return;
  }
  if (runs == 1) {
    backend_->begin_capture();
    try {
      run_lists(lists, scalars);
      backend_->end_capture(graph);
    } catch (...) {
      backend_->abort_capture();
      graph_runs_[graph] = 0;
      throw;
    }
  }
  backend_->replay(graph, scalars);
}

void Executable::run_step(const StepScalars& s) {
  refresh_copies_if_stale(s);
  run_graph(kTrainStep, {&program_.forward, &program_.backward, &program_.update}, s);
}

std::vector<OpTime> Executable::profile_step(const StepScalars& scalars) {
  using Clock = std::chrono::steady_clock;
  std::vector<OpTime> times;
  refresh_copies_if_stale(scalars);  // not part of a step: untimed
  backend_->activate();
  backend_->synchronize();
  const std::pair<const char*, const std::vector<Op>*> lists[] = {
      {"forward", &program_.forward}, {"backward", &program_.backward}, {"update", &program_.update}};
  for (const auto& [name, ops] : lists) {
    backend_->stage_scalars(scalars);
    backend_->synchronize();
    for (const Op& op : *ops) {
      const auto start = Clock::now();
      run_op(op, scalars);
      backend_->after_ops();  // each op timed with all of its work
      backend_->synchronize();
      times.push_back({&op, name, std::chrono::duration<double, std::milli>(Clock::now() - start).count()});
    }
  }
  return times;
}

void Executable::run_forward(const StepScalars& s) {
  refresh_copies_if_stale(s);
  run(program_.forward, s);
}
void Executable::run_backward(const StepScalars& s) {
  refresh_copies_if_stale(s);
  run(program_.backward, s);
}
void Executable::run_update(const StepScalars& s) {
  refresh_copies_if_stale(s);
  run(program_.update, s);
}
void Executable::run_inference(const StepScalars& s) {
  refresh_copies_if_stale(s);
  run_graph(kInference, {&program_.inference}, s);
}

}  // namespace kiln
