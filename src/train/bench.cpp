#include "kiln/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/parallel.h"
#include "core/random.h"
#include "kiln/compile.h"
#include "kiln/data_parallel.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/memory_plan.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Normal values in the input's dtype (fp32 in every training program: the device casts them)
// and labels spread over the classes, made once on the host and copied in.
void fill_synthetic_batch(Executable& exe, uint64_t seed) {
  const Program& p = exe.program();
  const TensorSpec& input = p.tensors[p.input];
  const int64_t n = numel(input.shape);
  // In parallel blocks (a value depends on its index alone): 38.5 million values at batch 256 and
  // 224² took 1.5 s of the first step on one thread.
  auto fill = [&](auto* x) {
    parallel_each(n, 1 << 16, [&](int64_t i) { x[i] = random_normal(seed, 1, uint64_t(i)); });
  };
  if (input.dtype == DType::F32) {
    std::vector<float> x(static_cast<size_t>(n));
    fill(x.data());
    exe.write(p.input, x.data(), x.size() * sizeof(float));
  } else if (input.dtype == DType::F64) {
    std::vector<double> x(static_cast<size_t>(n));
    fill(x.data());
    exe.write(p.input, x.data(), x.size() * sizeof(double));
  } else {
    fail("bench: a training program's input is fp32 or fp64, not {}", dtype_name(input.dtype));
  }
  const int64_t classes = p.tensors[p.logits].shape[1];
  std::vector<int32_t> labels(static_cast<size_t>(p.tensors[p.label].shape[0]));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(random_bits(seed, 2, i) % uint64_t(classes));
  exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
}

}  // namespace

BenchResult bench_training(const Blueprint& blueprint, const CompileOptions& options, const BenchOptions& bench) {
  if (bench.steps < 1) fail("bench: --steps must be >= 1 (got {}); use e.g. --steps 20", bench.steps);
  if (bench.warmup < 0) fail("bench: --warmup must be >= 0 (got {}); use e.g. --warmup 5", bench.warmup);
  if (!options.loss) fail("bench: the benchmark trains with a loss; compile with CompileOptions::loss = true");
  const bool cuda = options.device == Device::CUDA;
  const size_t used_before = cuda ? cuda_memory_in_use(options.device_index) : 0;
  BenchResult r;
  const auto start = Clock::now();
  Program program = compile(blueprint, options);
  r.compile_seconds = seconds_since(start);
  Executable exe(std::move(program), bench.seed);
  r.start = exe.start_seconds();
  // Data parallel: every rank its own batch, and rank 0's starting state.
  const ProcessGroup* group = options.data_parallel.get();
  const int ranks = group ? group->ranks() : 1;
  fill_synthetic_batch(exe, bench.seed + uint64_t(group ? group->rank() : 0));
  exe.broadcast_state_from_rank0();
  const int loss = exe.program().loss;
  auto step = [&](int64_t i) {
    const StepScalars s{bench.lr, i, bench.seed};
    exe.run_step(s);
    exe.synchronize();
  };
  auto loss_at = [&](int64_t i) {
    const double value = exe.program().tensors[loss].dtype == DType::F64 ? exe.read<double>(loss)[0]
                                                                          : exe.read<float>(loss)[0];
    if (!std::isfinite(value))
      fail("bench: step {} gave a non-finite loss ({}); the model diverged on synthetic data", i, value);
    return value;
  };
  const auto step_one = Clock::now();
  step(0);
  r.step_one_seconds = seconds_since(step_one);
  r.first_step_seconds = seconds_since(start);
  r.first_loss = loss_at(0);
  int64_t i = 1;
  for (; i <= bench.warmup; ++i) step(i);
  for (int k = 0; k < bench.steps; ++k, ++i) {
    const auto t0 = Clock::now();
    step(i);
    r.step_ms.push_back(1e3 * seconds_since(t0));
  }
  r.last_loss = loss_at(i - 1);
  if (bench.profile) {
    const Program& p = exe.program();
    for (const OpTime& t : exe.profile_step({bench.lr, i, bench.seed})) {
      OpProfile o;
      o.list = t.list, o.kind = op_kind_name(t.op->kind), o.ms = t.ms;
      o.layer = t.op->layer >= 0 ? p.layer_of(*t.op).name : "";
      const OpCost cost = op_cost(p, *t.op);  // the op family's rule (src/ops/<family>/<family>_op_costs.cpp)
      o.flops = cost.flops, o.bytes = cost.bytes;
      o.floor_ms = std::max(o.flops / (bench.peak_tflops * 1e12), o.bytes / (bench.peak_tbps * 1e12)) * 1e3;
      r.profile.push_back(std::move(o));
    }
  }
  std::vector<double> sorted = r.step_ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t m = sorted.size();
  r.median_step_ms = m % 2 ? sorted[m / 2] : 0.5 * (sorted[m / 2 - 1] + sorted[m / 2]);
  r.images_per_second = double(options.batch) * ranks / (r.median_step_ms * 1e-3);  // the global batch
  r.planned_bytes = exe.plan().arena_bytes;
  const Shape& input = exe.program().tensors[size_t(exe.program().input)].shape;
  r.input_hwc = {input[1], input[2], input[3]};
  r.workspace_bytes = exe.workspace_bytes();
  if (cuda) {
    const size_t used_after = cuda_memory_in_use(options.device_index);
    r.device_bytes = used_after > used_before ? used_after - used_before : 0;
  }
  return r;
}

}  // namespace kiln
