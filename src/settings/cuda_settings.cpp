#include "settings/cuda_settings.h"

#include "kiln/error.h"

namespace kiln {

const std::vector<Setting>& cuda_settings() {
  using C = CudaOptions;
  static const std::vector<Setting> rows = {
      switch_setting<C>({.key = "tune",
                         .flag = "--cudnn-tune",
                         .env = "KILN_CUDNN_TUNE",
                         .help = "1: time the plans cuDNN's heuristics offer and keep the fastest (default); 0: keep "
                                 "the first usable plan (or the plan cache's)",
                         .member = "CompileOptions::cuda.tune",
                         .reported = true},
                        &C::tune),
      count_setting<C>({.key = "tune_plans",
                        .flag = "--tune-plans",
                        .env = "KILN_CUDNN_TUNE_PLANS",
                        .help = "how many of the plans that build to time, in heuristic order (default 4); 0: every "
                                "plan",
                        .member = "CompileOptions::cuda.tune_plans",
                        .reported = true},
                       &C::tune_plans, {0, 9999}),
      count_setting<C>({.key = "tune_budget_ms",
                        .flag = "--tune-budget-ms",
                        .env = "KILN_CUDNN_TUNE_BUDGET_MS",
                        .help = "milliseconds one graph may spend building plans to time, at least one plan built "
                                "(default 2000); 0: no limit (with --tune-plans 0: exhaustive tuning)",
                        .member = "CompileOptions::cuda.tune_budget_ms",
                        .reported = true},
                       &C::tune_budget_ms, {0, 600000}),
      text_setting<C>({.key = "plan_cache",
                       .flag = "--plan-cache",
                       .env = "KILN_PLAN_CACHE",
                       .help = "file of tuned plan choices: later runs on the same GPU, driver, cuDNN and kiln "
                               "rebuild them without tuning (default: ~/.cache/kiln/cudnn-plans.json, or under "
                               "$XDG_CACHE_HOME; none: no file)",
                       .member = "CompileOptions::cuda.plan_cache"},
                      &C::plan_cache),
      text_setting<C>({.key = "tune_log",
                       .flag = "--tune-log",
                       .env = "KILN_TUNE_LOG",
                       .help = "append what tuning found, one JSON line per graph",
                       .member = "CompileOptions::cuda.tune_log"},
                      &C::tune_log),
      switch_setting<C>({.key = "graphs",
                         .flag = "--cuda-graphs",
                         .env = "KILN_CUDA_GRAPHS",
                         .help = "1: replay each step as one captured CUDA Graph (default); 0: launch every op",
                         .member = "CompileOptions::cuda.graphs",
                         .reported = true},
                        &C::graphs),
      switch_setting<C>({.key = "conv_tf32",
                         .flag = "--conv-tf32",
                         .env = "KILN_CONV_TF32",
                         .help = "1: fp32 convolutions may use TF32 tensor cores, as PyTorch's default; 0: true fp32 "
                                 "only (default)",
                         .member = "CompileOptions::cuda.conv_tf32",
                         .reported = true},
                        &C::conv_tf32),
      switch_setting<C>({.key = "deterministic",
                         .flag = "--cudnn-deterministic",
                         .env = "KILN_CUDNN_DETERMINISTIC",
                         .help = "1: prefer cuDNN plans that give the same bytes for the same inputs (default); 0: "
                                 "the fastest of all",
                         .member = "CompileOptions::cuda.deterministic",
                         .reported = true},
                        &C::deterministic),
      count_setting<C>({.key = "workspace_mib",
                        .flag = "--cudnn-workspace-mib",
                        .env = "KILN_CUDNN_WORKSPACE_MIB",
                        .help = "the most workspace one cuDNN plan may use, in MiB; plans needing more are skipped "
                                "(default 1024)",
                        .member = "CompileOptions::cuda.workspace_mib",
                        .reported = true},
                       &C::workspace_mib, {1, 65536}),
      count_setting<C>({.key = "tune_runs",
                        .flag = "--tune-runs",
                        .env = "KILN_CUDNN_TIMED_RUNS",
                        .help = "timed runs per plan when tuning, after one warm-up; the median counts (default 5)",
                        .member = "CompileOptions::cuda.tune_runs",
                        .reported = true},
                       &C::tune_runs, {1, 100}),
      count_setting<C>({.key = "conv_stats",
                        .flag = "--conv-stats",
                        .env = "KILN_CONV_STATS",
                        .help = "how a convolution before BatchNorm sums its output per channel: 0 a sum kernel after "
                                "it (repeatable bits), 1 cuDNN's conv + genstats graph where it builds (fp16), else 0 "
                                "(default), 2 as 1, and in bf16 the faster of 0 and cuDNN's graph that sums in the "
                                "convolution's epilogue",
                        .member = "CompileOptions::cuda.conv_stats",
                        .reported = true},
                       &C::conv_stats, {0, 2}),
      switch_setting<C>({.key = "cutlass",
                         .flag = "--cutlass",
                         .env = "KILN_CUTLASS",
                         .help = "1: kiln's CUTLASS convolution that sums its output for BatchNorm (sm_90, fp16/bf16, "
                                 "1x1 of stride 1) where faster when timed at prepare (default); 0: cuDNN's ways only",
                         .member = "CompileOptions::cuda.cutlass",
                         .reported = true},
                        &C::cutlass),
      count_setting<C>({.key = "fold_taps",
                        .flag = "--fold-taps",
                        .env = "KILN_FOLD_TAPS",
                        .help = "a first layer's few input channels folded with filter taps into more channels "
                                "(ResNet's stem: 16 channels, 4x4) for its forward and weight gradient: 0 never, 1 "
                                "folds that at most double the input, where faster when timed at prepare (default), 2 "
                                "every fold that applies",
                        .member = "CompileOptions::cuda.fold_taps",
                        .reported = true},
                       &C::fold_taps, {0, 2}),
      count_setting<C>({.key = "linear_workspace_mib",
                        .flag = "--linear-workspace-mib",
                        .env = "KILN_LINEAR_WORKSPACE_MIB",
                        .help = "the most workspace one linear layer's cuBLASLt GEMM may use, in MiB; 0: only "
                                "algorithms without (default 32)",
                        .member = "CompileOptions::cuda.linear_workspace_mib",
                        .reported = true},
                       &C::linear_workspace_mib, {0, 65536}),
      count_setting<C>({.key = "linear_candidates",
                        .flag = "--linear-candidates",
                        .env = "KILN_LINEAR_CANDIDATES",
                        .help = "cuBLASLt heuristic candidates a linear GEMM looks through, best first, for one whose "
                                "split-K partial sums stay fp32 (default 16)",
                        .member = "CompileOptions::cuda.linear_candidates",
                        .reported = true},
                       &C::linear_candidates, {1, 128}),
  };
  return rows;
}

const Setting& cuda_setting(const char* key) {
  const Setting* row = find_setting(cuda_settings(), key);
  if (!row) fail("internal: no CUDA setting '{}'", key);
  return *row;
}

}  // namespace kiln
