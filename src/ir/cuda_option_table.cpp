#include "ir/cuda_option_table.h"

namespace kiln {

namespace {

using Type = CudaOptionField::Type;

CudaOptionField switch_row(const char* member, const char* flag, const char* env, bool CudaOptions::*field,
                           const char* help) {
  CudaOptionField f{member, flag, env, Type::Switch, 0, 1, help};
  f.switch_field = field;
  return f;
}

CudaOptionField count_row(const char* member, const char* flag, const char* env, int CudaOptions::*field, int lo,
                          int hi, const char* help) {
  CudaOptionField f{member, flag, env, Type::Count, lo, hi, help};
  f.count_field = field;
  return f;
}

CudaOptionField file_row(const char* member, const char* flag, const char* env, std::string CudaOptions::*field,
                         const char* help) {
  CudaOptionField f{member, flag, env, Type::File, 0, 0, help};
  f.file_field = field;
  return f;
}

}  // namespace

const std::vector<CudaOptionField>& cuda_option_fields() {
  static const std::vector<CudaOptionField> fields = {
      switch_row("tune", "--cudnn-tune", "KILN_CUDNN_TUNE", &CudaOptions::tune,
                 "1: time the plans cuDNN's heuristics offer and keep the fastest (default); 0: keep the first "
                 "usable plan (or the plan cache's)"),
      count_row("tune_plans", "--tune-plans", "KILN_CUDNN_TUNE_PLANS", &CudaOptions::tune_plans, 0, 9999,
                "how many of the plans that build to time, in heuristic order (default 4); 0: every plan"),
      count_row("tune_budget_ms", "--tune-budget-ms", "KILN_CUDNN_TUNE_BUDGET_MS", &CudaOptions::tune_budget_ms, 0,
                600000,
                "milliseconds one graph may spend building plans to time, at least one plan built (default 2000); 0: "
                "no limit (with --tune-plans 0: exhaustive tuning)"),
      file_row("plan_cache", "--plan-cache", "KILN_PLAN_CACHE", &CudaOptions::plan_cache,
               "file of tuned plan choices: later runs on the same GPU, driver, cuDNN and kiln rebuild them without "
               "tuning (default: ~/.cache/kiln/cudnn-plans.json, or under $XDG_CACHE_HOME; none: no file)"),
      file_row("tune_log", "--tune-log", "KILN_TUNE_LOG", &CudaOptions::tune_log,
               "append what tuning found, one JSON line per graph"),
      switch_row("graphs", "--cuda-graphs", "KILN_CUDA_GRAPHS", &CudaOptions::graphs,
                 "1: replay each step as one captured CUDA Graph (default); 0: launch every op"),
      switch_row("conv_tf32", "--conv-tf32", "KILN_CONV_TF32", &CudaOptions::conv_tf32,
                 "1: fp32 convolutions may use TF32 tensor cores, as PyTorch's default; 0: true fp32 only (default)"),
      switch_row("deterministic", "--cudnn-deterministic", "KILN_CUDNN_DETERMINISTIC", &CudaOptions::deterministic,
                 "1: prefer cuDNN plans that give the same bytes for the same inputs (default); 0: the fastest of "
                 "all"),
      count_row("workspace_mib", "--cudnn-workspace-mib", "KILN_CUDNN_WORKSPACE_MIB", &CudaOptions::workspace_mib, 1,
                65536, "the most workspace one cuDNN plan may use, in MiB; plans needing more are skipped (default 1024)"),
      count_row("tune_runs", "--tune-runs", "KILN_CUDNN_TIMED_RUNS", &CudaOptions::tune_runs, 1, 100,
                "timed runs per plan when tuning, after one warm-up; the median counts (default 5)"),
      count_row("conv_stats", "--conv-stats", "KILN_CONV_STATS", &CudaOptions::conv_stats, 0, 2,
                "how a convolution before BatchNorm sums its output per channel: 0 a sum kernel after it (repeatable "
                "bits), 1 cuDNN's conv + genstats graph where it builds (fp16), else 0 (default), 2 as 1, and in bf16 "
                "the faster of 0 and cuDNN's graph that sums in the convolution's epilogue"),
      switch_row("cutlass", "--cutlass", "KILN_CUTLASS", &CudaOptions::cutlass,
                 "1: kiln's CUTLASS convolution that sums its output for BatchNorm (sm_90, fp16/bf16, 1x1 of "
                 "stride 1) where faster when timed at prepare (default); 0: cuDNN's ways only"),
      count_row("fold_taps", "--fold-taps", "KILN_FOLD_TAPS", &CudaOptions::fold_taps, 0, 2,
                "a first layer's few input channels folded with filter taps into more channels (ResNet's stem: "
                "16 channels, 4x4) for its forward and weight gradient: 0 never, 1 folds that at most double "
                "the input, where faster when timed at prepare (default), 2 every fold that applies"),
      count_row("linear_workspace_mib", "--linear-workspace-mib", "KILN_LINEAR_WORKSPACE_MIB",
                &CudaOptions::linear_workspace_mib, 0, 65536,
                "the most workspace one linear layer's cuBLASLt GEMM may use, in MiB; 0: only algorithms without "
                "(default 32)"),
      count_row("linear_candidates", "--linear-candidates", "KILN_LINEAR_CANDIDATES", &CudaOptions::linear_candidates,
                1, 128,
                "cuBLASLt heuristic candidates a linear GEMM looks through, best first, for one whose split-K "
                "partial sums stay fp32 (default 16)"),
  };
  return fields;
}

int cuda_option_number(const CudaOptions& options, const CudaOptionField& field) {
  if (field.switch_field) return options.*field.switch_field ? 1 : 0;
  return field.count_field ? options.*field.count_field : 0;
}

void set_cuda_option_number(CudaOptions& options, const CudaOptionField& field, int value) {
  if (field.switch_field) options.*field.switch_field = value != 0;
  if (field.count_field) options.*field.count_field = value;
}

}  // namespace kiln
