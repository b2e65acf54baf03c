#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "kiln/dtype.h"

namespace kiln {

// The optimizer and its settings. `name` chooses a family ("sgd", "adamw", "lars", "rmsprop": each
// is src/ops/optimizer/<name>_optimizer.cpp, which declares its settings with their keys, defaults
// and ranges, its state and the update it emits; `kiln train --help` lists them), and `values`
// sets that family's settings by key; a key left out takes the family's default. compile()
// refuses an unknown name, a key the family does not take and a value out of its range, naming
// them. Switches are 1 or 0.
//   opts.optimizer = {"adamw"};
//   opts.optimizer.set("beta1", 0.95).set("weight_decay", 0.05);
struct OptimizerConfig {
  OptimizerConfig(std::string family = "sgd") : name(std::move(family)) {}  // NOLINT: {"adamw"} converts

  std::string name;
  std::map<std::string, double> values;

  OptimizerConfig& set(const std::string& key, double value) {
    values[key] = value;
    return *this;
  }
  // The value set for `key`, or `otherwise` when none is.
  double value_or(const std::string& key, double otherwise) const {
    const auto it = values.find(key);
    return it == values.end() ? otherwise : it->second;
  }
};

// Settings of the CUDA backend (read when an executable makes it; the CPU backend ignores them).
// The KILN_* environment variable named with each field overrides it when set (README.md, GPU);
// an out-of-range field or a malformed variable is a kiln::Error naming it.
struct CudaOptions {
  // Time the plans cuDNN's heuristics offer for each convolution graph and keep the fastest; false
  // keeps the heuristics' first usable plan (or the plan cache's). KILN_CUDNN_TUNE=0|1.
  bool tune = true;
  // Time only the first N plans that build, in heuristic order (building dominates tuning: about
  // 5 s per graph at batch 256 on an H200 with every plan); 0 times every plan. 0 to 9999.
  // KILN_CUDNN_TUNE_PLANS=N. Bounded by default so that a first run starts in seconds; exhaustive
  // tuning is tune_plans = 0 with tune_budget_ms = 0.
  int tune_plans = 4;
  // Milliseconds one graph's tuning may spend building plans; once spent, the plans built so far
  // are timed (at least one). 0: no limit. 0 to 600000. KILN_CUDNN_TUNE_BUDGET_MS=N.
  int tune_budget_ms = 2000;
  // File of tuned plan choices shared by runs (src/runtime/cuda/plan_cache.h): a graph found there
  // rebuilds the recorded plan instead of tuning, and every tuned choice is added; safe for several
  // processes at once. Empty (the default): the user's cache folder, $XDG_CACHE_HOME/kiln/
  // cudnn-plans.json, else ~/.cache/kiln/cudnn-plans.json (a default file that cannot be read or
  // written is warned about and left out); "none": no file. KILN_PLAN_CACHE=<file>|none.
  std::string plan_cache;
  // File to which what tuning found is appended, one JSON object a line per graph, when the
  // executable is destroyed. Empty: no log. KILN_TUNE_LOG=<file>.
  std::string tune_log;
  // How a convolution that BatchNorm follows (CBR, conv + BN) gets its output's per-channel sums:
  // 0 the convolution, then kiln's sum kernel over its output, in every dtype; 1 (the default)
  // cuDNN's conv + genstats graph where it builds (fp16), else the sum kernel; 2 as 1, but where
  // genstats does not build (bf16), the faster of the sum kernel and cuDNN's runtime-fused graph
  // that sums the convolution's results in its epilogue, timed at prepare. Both cuDNN graphs end
  // their sums in atomics, so two runs differ in the last bits (cuDNN notes neither as
  // nondeterministic, so `deterministic` does not see them): 0 gives repeatable bits.
  // KILN_CONV_STATS=0|1|2.
  int conv_stats = 1;
  // kiln's own Hopper convolution on CUTLASS (sm_90 GPUs, fp16/bf16; ops/conv/conv_sums_cutlass.h):
  // the 1x1 convolution of stride 1 that sums its own output for BatchNorm in its epilogue, in a
  // fixed order (repeatable bits), where, timed at prepare on the op's own tensors, it beats the
  // ways conv_stats offers (untimed, with tuning off, those stay). false: cuDNN's ways only.
  // conv_stats 0 keeps the sum kernel whatever this says. KILN_CUTLASS=0|1.
  bool cutlass = true;
  // A first layer's few input channels (3 for RGB) folded with filter taps into more channels
  // (src/ops/conv/tap_fold_cuda.h: ResNet's 7x7 stride-2 stem becomes a 4x4 convolution of 16
  // channels), which tensor cores run nearer their rate, for the forward with statistics and the
  // weight gradient: 0 never; 1 (the default) the folds whose input is at most twice the layer's
  // (folding by stride: ResNet's stem, not VGG's stride-1 first layer, whose folds cost more memory
  // than they gain), timed at prepare beside the other ways and kept where faster (untimed, with
  // tuning off, the other ways stay); 2 every fold that applies, alone (tests, A/B).
  // The same products are summed, in another order. KILN_FOLD_TAPS=0|1|2.
  int fold_taps = 1;
  // Capture each training step (forward, loss, backward, update, loss-scale bookkeeping) and each
  // inference pass as a CUDA Graph after a first run of it, and replay that graph from then on:
  // one launch per step instead of one per kernel. false runs every op from the host each time.
  // KILN_CUDA_GRAPHS=0|1.
  bool graphs = true;
  // fp32 convolutions may use TF32 tensor cores (inputs rounded to 10 mantissa bits, fp32
  // accumulation; ~1e-3 relative error instead of ~1e-6), as PyTorch does by default
  // (torch.backends.cudnn.allow_tf32). Off: only true fp32 plans. fp16/bf16 are not affected, nor
  // are linear layers. KILN_CONV_TF32=0|1.
  bool conv_tf32 = false;
  // Prefer cuDNN plans without a NONDETERMINISTIC note (same inputs, same bytes); a nondeterministic
  // plan is used only where no other builds. false lets tuning pick the fastest of all. The
  // statistics graphs carry no such note but end in atomics: conv_stats says which run.
  // KILN_CUDNN_DETERMINISTIC=0|1.
  bool deterministic = true;
  // The most workspace one cuDNN plan may ask for, in MiB; plans needing more are skipped. 1 to
  // 65536. KILN_CUDNN_WORKSPACE_MIB=N.
  int workspace_mib = 1024;
  // Timed runs per plan when tuning (after one warm-up; the median counts). 1 to 100.
  // KILN_CUDNN_TIMED_RUNS=N.
  int tune_runs = 5;
  // The most workspace one linear layer's GEMM may ask cuBLASLt for, in MiB (the split-K partial
  // sums of the largest VGG classifier layers need a few); 0 allows only algorithms without
  // workspace. 0 to 65536. KILN_LINEAR_WORKSPACE_MIB=N.
  int linear_workspace_mib = 32;
  // How many of cuBLASLt's heuristic candidates a linear GEMM looks at, best first, for one whose
  // split-K partial sums stay fp32. 1 to 128. KILN_LINEAR_CANDIDATES=N.
  int linear_candidates = 16;
};

// Settings of the CPU backend (read when an executable makes it; the CUDA backend ignores them).
// Unlike CudaOptions' variables, KILN_THREADS does not override the field: it is the default the
// field leaves in place (ctest gives every test KILN_THREADS=1, and the tests of thread-count
// independence ask for their own counts). The rows of src/settings/cpu_settings.h have the flag and
// the range.
struct CpuOptions {
  // Threads of the CPU kernels (kiln/threads.h). The pool is one per process, so this is applied
  // (kiln::set_threads) when a CPU Executable is made: the last one made with a count sets it for
  // all. 0 leaves the pool as it is: KILN_THREADS when set, else the cores this process may use,
  // unless kiln::set_threads changed it. 0 to kiln::max_threads(). --threads N.
  int threads = 0;
  // Which kernels run the CPU convolutions (process-wide, like the pool): 1 oneDNN's, 2 kiln's
  // own im2col + GEMM, the reference oneDNN's are tested against (float64 programs always run
  // those), 3 oneDNN's with bf16 products: fp32 tensors, each convolution's inputs rounded to
  // bf16 and their products added in fp32 (PyTorch's mkldnn.conv.fp32_precision = "bf16"), on
  // CPUs with bf16 instructions (AMX or AVX-512 BF16; elsewhere preparing a convolution is a
  // kiln::Error). 0 leaves the choice as it is: KILN_CPU_KERNELS when set, else oneDNN where kiln
  // was built with it. --cpu-kernels onednn|reference|onednn-bf16.
  int kernels = 0;
};

// Dynamic loss scaling, as PyTorch's torch.amp.GradScaler: the loss gradient is multiplied by a
// scale kept in the program, so small fp16 gradients do not flush to zero; the optimizer divides
// it out and skips a step whose gradients hold inf/NaN, which also multiplies the scale by
// `backoff_factor`; `growth_interval` clean steps in a row multiply it by `growth_factor`. All of
// it runs on the device (the host reads nothing). Needs a loss (CompileOptions::loss).
enum class LossScaleMode : uint8_t {
  Auto,     // dynamic for fp16; off for bf16 (its range is fp32's), fp32 and fp64
  Off,
  Dynamic,  // in any precision (fp32 programs run it on the CPU, for the tests)
};

LossScaleMode parse_loss_scale_mode(const std::string& text);  // "auto", "dynamic", "off"; throws kiln::Error

struct LossScaling {
  LossScaleMode mode = LossScaleMode::Auto;
  float init_scale = 65536.f;   // 2^16, PyTorch's default
  float growth_factor = 2.f;    // > 1
  float backoff_factor = 0.5f;  // in (0, 1)
  int growth_interval = 2000;   // clean steps in a row before the scale grows; >= 1

  bool enabled(Precision precision) const {
    return mode == LossScaleMode::Dynamic || (mode == LossScaleMode::Auto && precision == Precision::FP16);
  }
};

// The ranks of a data-parallel run (kiln/data_parallel.h): one process per GPU, joined over NCCL.
class ProcessGroup;

struct CompileOptions {
  Device device = Device::CPU;
  int device_index = 0;  // which GPU (cudaSetDevice ordinal) when device is CUDA
  Precision precision = Precision::FP32;
  int batch = 32;
  Shape input_hwc;            // empty: take the blueprint's own input geometry
  bool fuse_cbr = true;       // fuse Conv -> BN -> ReLU into CBR, and ResNet block ends (conv_bn + bn_add_relu)
  // Fusion across layers (with fuse_cbr): a CBR whose output feeds only CBR or conv_bn layers leaves its
  // BatchNorm + ReLU to them, applied as they read its convolution's output (`kiln plan` shows the
  // seams). Off by default. A consumer writes the applied input into a scratch of one op's life and
  // convolves it; the BN+ReLU outputs and masks of the producers leave the memory plan.
  bool fuse_seams = false;
  // With a loss (the default) the program ends in softmax cross-entropy on labels. Without,
  // any blueprint compiles (a block, a backbone): its output is an Output tensor and backward
  // starts from `output_grad`, written by the caller.
  bool loss = true;
  // Also compute the gradient of the data input ("d:input"), as for a block inside a network;
  // by default layers reading the data batch skip it (first-layer backward).
  bool input_grad = false;
  float label_smoothing = 0.f;
  // Fine-tuning: the layers up to and including this one ("layer3" for a block, every layer whose
  // name is it or starts with "layer3."; the names `kiln plan` shows) are frozen, as PyTorch users
  // freeze a backbone: they compute as in eval mode (BatchNorm on its running statistics, which stay
  // as they are; no dropout), no gradient is computed for them, and the optimizer neither updates
  // nor decays their parameters. Their tensors keep their names, so checkpoints and weights move
  // between frozen and unfrozen programs. Empty: nothing is frozen.
  std::string freeze;
  OptimizerConfig optimizer;
  LossScaling loss_scaling;
  CpuOptions cpu;    // when device is CPU
  CudaOptions cuda;  // when device is CUDA
  // Data parallel (CUDA): the group this rank trains with (join_process_group). After each backward
  // the gradients are averaged over its ranks, in buckets started as soon as their layers' gradients
  // are written, inside the captured step. nullptr: this process trains alone. `batch` is per rank.
  std::shared_ptr<ProcessGroup> data_parallel;
};

}  // namespace kiln
