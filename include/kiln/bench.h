#pragma once
// Training throughput on synthetic data already in device memory: what `kiln bench` prints and
// what bench/report_models.py sets beside PyTorch's numbers for the same model and batch.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/executable.h"
#include "kiln/options.h"

namespace kiln {

struct BenchOptions {
  int warmup = 5;   // steps run before timing (cuDNN plans are tuned before the first)
  int steps = 20;   // timed steps, >= 1
  uint64_t seed = 1;
  float lr = 0.01f;  // constant: the benchmark measures speed, the values only need to stay finite
  // After the timed steps, one more step op by op with each op waited for (Executable::
  // profile_step), every op set against its floor: its multiply-adds at `peak_tflops` and the
  // bytes of its tensors at `peak_tbps`, whichever is longer. The defaults are what an H200
  // measured (an fp16 8192^3 matmul and a device-to-device copy, ../shared/baselines).
  bool profile = false;
  double peak_tflops = 737, peak_tbps = 4.18;
};

// One op of the profiled step.
struct OpProfile {
  std::string list, kind, layer;  // "forward"/"backward"/"update", op kind, layer name ("" for update ops)
  double ms = 0;
  double flops = 0, bytes = 0;  // convolution and GEMM work (0 for other ops); bytes of its tensors
  double floor_ms = 0;          // max(flops / peak, bytes / bandwidth)
};

struct BenchResult {
  double first_step_seconds = 0;  // compile, memory plan, plan tuning and the first step
  // Its parts: compile() (passes and memory plan), the Executable's construction by phase, and the
  // first step itself (op by op; libraries load their kernels lazily).
  double compile_seconds = 0;
  StartSeconds start;
  double step_one_seconds = 0;
  std::vector<double> step_ms;    // every timed step: host clock to a full device synchronize
  // From the median step; data parallel (CompileOptions::data_parallel): the images of all ranks.
  double median_step_ms = 0, images_per_second = 0;
  double first_loss = 0, last_loss = 0;
  Shape input_hwc;             // the images trained on: height, width, channels
  size_t planned_bytes = 0;    // the memory plan's arena (kiln plan prints the same)
  size_t workspace_bytes = 0;  // op scratch memory (per stream, all streams)
  // Device memory the program took once ready, beyond the CUDA context (cudaMemGetInfo before
  // compiling and after the timed steps: arena, workspaces, cuDNN and cuBLAS state); 0 on the CPU.
  size_t device_bytes = 0;
  std::vector<OpProfile> profile;  // with BenchOptions::profile, in program order
};

// Compiles `blueprint` with `options` (its loss included), fills the input with normal values
// and the labels with random classes once, then trains warmup + steps steps with SGD at a
// constant learning rate. A non-finite loss is a kiln::Error naming the step.
BenchResult bench_training(const Blueprint& blueprint, const CompileOptions& options, const BenchOptions& bench);

}  // namespace kiln
