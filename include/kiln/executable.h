#pragma once
// A Program bound to a memory plan and a backend. Owns the arena; runs the op lists.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kiln/memory_plan.h"
#include "kiln/program.h"

namespace kiln {

// Values that change from step to step without recompiling.
struct StepScalars {
  float lr = 0.f;
  int64_t step = 0;  // optimizer steps taken so far (AdamW bias correction, dropout masks)
  uint64_t seed = 0;
};

struct HostTensor {
  const TensorSpec* spec = nullptr;
  void* data = nullptr;  // the tensor's memory in the arena (device memory on CUDA)
  template <class T>
  T* as() const { return static_cast<T*>(data); }
  int64_t numel() const { return kiln::numel(spec->shape); }
};

class Backend;
class DevicePixels;  // kiln/device_pixels.h

// One op of a profiled step (Executable::profile_step).
struct OpTime {
  const Op* op = nullptr;
  const char* list = "";  // "forward", "backward" or "update"
  double ms = 0;
};

// Where the Executable's construction spent its time, in seconds: the backend (device context,
// library handles), the arena, initializing the state, preparing every op (kernel choice, cuDNN
// plans and their tuning). `kiln bench` reports them beside the first step.
struct StartSeconds {
  double backend = 0, allocate = 0, init_state = 0, prepare_ops = 0;
};

class Executable {
 public:
  Executable(Program program, uint64_t seed);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  const Program& program() const { return program_; }
  const MemoryPlan& plan() const { return program_.memory; }

  // Re-initializes parameters (Kaiming/uniform as PyTorch), buffers and optimizer state.
  void init_state(uint64_t seed);

  // Direct access to a tensor's memory: host memory on CPU programs only.
  HostTensor tensor(int id);
  HostTensor tensor(const std::string& name);  // throws kiln::Error naming unknown tensors
  int id(const std::string& name) const;       // throws kiln::Error naming unknown tensors

  // Copies between host memory and a tensor on any device; sizes must match the tensor. Writing
  // parameters (or init_state) makes the next op list refresh their compute copies first, in
  // mixed precision (Program::refresh_copies); only the update keeps them current otherwise.
  void write(int id, const void* host, size_t bytes);
  void read(int id, void* host, size_t bytes);
  // write() without waiting for the copy: the bytes are staged (pinned memory on the GPU) and
  // reach the tensor before the next op list runs; `host` may be reused at once. For the batch
  // copied in before every step.
  void write_ordered(int id, const void* host, size_t bytes);
  // write_ordered of uint8 HWC pixels into F32 tensor `id`, normalized on the way as
  // pixel * scale[c] + bias[c] (c = the value's index % scale.size(), at most 4 channels); on the
  // GPU the pixels cross as bytes and are converted there. Bit for bit the floats the loader's
  // normalization gives.
  void write_pixels_ordered(int id, const uint8_t* pixels, size_t count, const std::vector<float>& scale,
                            const std::vector<float>& bias);
  // The same from pixels the GPU decoded (Batch::device; CUDA backend only): the conversion waits
  // for them in stream order, and the loader may reuse their buffer once it has run.
  void write_device_pixels_ordered(int id, DevicePixels& pixels, size_t count, const std::vector<float>& scale,
                                   const std::vector<float>& bias);
  template <class T>
  std::vector<T> read(int id) {
    std::vector<T> out(program_.tensors.at(id).bytes() / sizeof(T));
    read(id, out.data(), out.size() * sizeof(T));
    return out;
  }
  // The gradient of trainable parameter `param` (by name, as Program::params names them) that the
  // last backward wrote, in the parameter's layout, widened exactly to double: in mixed precision
  // read from its fp16/bf16 gradient (Program::grads), and with loss scaling divided by the scale
  // that backward multiplied it by. Read it before run_update: the update may change the scale. A
  // name that is not a trainable parameter is a kiln::Error naming it.
  std::vector<double> gradient(const std::string& param);
  // Several tensors at once (one wait on the GPU instead of one per tensor): reads[i] receives
  // tensor ids[i], resized to its bytes.
  void read_many(const std::vector<int>& ids, std::vector<std::vector<std::byte>>& reads);
  void synchronize();  // waits for all issued work (a no-op on CPU)
  // Data parallel (CompileOptions::data_parallel): every rank's parameters, optimizer state and
  // buffers become rank 0's, in stream order (before training, after a checkpoint or weights
  // were loaded); with `buffers_only`, only the buffers (BatchNorm's running statistics, which each
  // rank updates from its own share of the batch, as PyTorch's DistributedDataParallel does before
  // its forward). Every rank must call it at the same point. Nothing when training alone.
  void broadcast_state_from_rank0(bool buffers_only = false);
  // Scratch memory the ops asked for while being prepared (all streams), beside the arena.
  size_t workspace_bytes() const;
  const StartSeconds& start_seconds() const { return start_seconds_; }

  // One training step: forward (loss included), backward and update. On the GPU with
  // CompileOptions::cuda.graphs the second step is captured as a CUDA Graph and every later
  // step replays it (one launch); the first runs op by op (libraries initialize lazily).
  void run_step(const StepScalars& scalars);
  // The parts of a step, always op by op (tests, and programs without an update).
  void run_forward(const StepScalars& scalars);  // training forward, loss included
  void run_backward(const StepScalars& scalars);
  void run_update(const StepScalars& scalars);
  // One training step op by op, each op waited for and timed by the host clock (launch included):
  // where a step's time goes. Slower than run_step by the waits; the step's effects are those of
  // an ordinary step.
  std::vector<OpTime> profile_step(const StepScalars& scalars);
  // The inference list, captured and replayed as run_step is.
  void run_inference(const StepScalars& scalars);

 private:
  void run(const std::vector<Op>& ops, const StepScalars& scalars);
  // The lists one after the other, each ending with the backend's after_ops; the step's scalars
  // are staged once before them (one write, one node in a captured graph).
  void run_lists(std::initializer_list<const std::vector<Op>*> lists, const StepScalars& scalars);
  void run_op(const Op& op, const StepScalars& scalars);  // one op, between the backend's before/after_op
  // Runs Program::refresh_copies, op by op and never captured, when the host changed parameters
  // since the copies were last made; every public run* calls it first.
  void refresh_copies_if_stale(const StepScalars& scalars);
  bool writes_parameters(int id) const;
  // Runs `lists` op by op, or as graph `graph` of the backend once captured (see run_step).
  void run_graph(int graph, std::initializer_list<const std::vector<Op>*> lists, const StepScalars& scalars);
  struct OpCall bind(const Op& op, const StepScalars& scalars);
  std::byte* memory_for_copy(int id, size_t bytes, const char* copy) const;
  void prepare_ops();
  Program program_;
  std::unique_ptr<Backend> backend_;
  std::byte* arena_ = nullptr;
  enum Graph { kTrainStep, kInference, kGraphs };
  int graph_runs_[kGraphs] = {};  // runs of each graph so far (captured on the second)
  // Data parallel: the gradient averages of the backward (runtime/gradient_buckets.h), each issued
  // after backward op `after_op`, in this order on every rank.
  struct RankAverage {
    void* data;
    size_t count;
    DType dtype;
    int after_op;
  };
  std::vector<RankAverage> rank_averages_;
  void plan_rank_averages();
  void run_backward_averaged(const StepScalars& scalars);
  bool copies_stale_ = true;      // parameters written since refresh_copies last ran
  StartSeconds start_seconds_;
};

}  // namespace kiln
