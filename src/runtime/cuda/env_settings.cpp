#include "runtime/cuda/env_settings.h"

#include <cstdlib>

#include "kiln/error.h"

namespace kiln::cuda {

namespace {
// The ranges of the numeric settings, shared by the option checks and the variables.
constexpr int kMaxTunePlans = 9999;
constexpr int kMaxPipelineChunks = 99;
}  // namespace

CudaOptions with_env_overrides(CudaOptions o) {
  o.tune = env_int("KILN_CUDNN_TUNE", 0, 1, o.tune ? 1 : 0,
                   "1 to time cuDNN's plans and keep the fastest or 0 to keep the heuristics' first") == 1;
  o.tune_plans = env_int("KILN_CUDNN_TUNE_PLANS", 0, kMaxTunePlans, o.tune_plans,
                         "how many plans to time (0: every plan)");
  if (auto path = env_text("KILN_PLAN_CACHE")) o.plan_cache = std::move(*path);
  if (auto path = env_text("KILN_TUNE_LOG")) o.tune_log = std::move(*path);
  o.side_stream = env_int("KILN_SIDE_STREAM", 0, 1, o.side_stream ? 1 : 0,
                          "1 to run wgrad beside dgrad (the default) or 0 to run it after") == 1;
  o.pipeline_chunks = env_int("KILN_PIPELINE_CHUNKS", 1, kMaxPipelineChunks, o.pipeline_chunks,
                              "the number of batch slices (1: off, the default)");
  o.overlap_ops = env_int("KILN_OVERLAP_OPS", 0, 1, o.overlap_ops ? 1 : 0,
                          "1 to let an op's wgrad run on beside the next op (the default) or 0 to join it "
                          "at the end of its op") == 1;
  o.conv_tf32 = env_int("KILN_CONV_TF32", 0, 1, o.conv_tf32 ? 1 : 0,
                        "1 to let fp32 convolutions use TF32 tensor cores or 0 for true fp32 only (the default)") == 1;
  o.graphs = env_int("KILN_CUDA_GRAPHS", 0, 1, o.graphs ? 1 : 0,
                     "1 to replay each step as a captured CUDA Graph (the default) or 0 to launch every op") == 1;
  return o;
}

void check_cuda_options(const CudaOptions& o) {
  if (o.tune_plans < 0 || o.tune_plans > kMaxTunePlans)
    fail("CompileOptions::cuda.tune_plans = {} is not valid: it takes how many plans to time, from 0 (every plan) "
         "to {}",
         o.tune_plans, kMaxTunePlans);
  if (o.pipeline_chunks < 1 || o.pipeline_chunks > kMaxPipelineChunks)
    fail("CompileOptions::cuda.pipeline_chunks = {} is not valid: it takes the number of batch slices, from 1 "
         "(off) to {}",
         o.pipeline_chunks, kMaxPipelineChunks);
}

std::optional<std::string> env_text(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

int env_int(const char* name, int lo, int hi, int fallback, const char* meaning) {
  const std::optional<std::string> text = env_text(name);
  if (!text) return fallback;
  // At most 9 digits: the value then fits an int before the range check.
  const bool digits = text->size() <= 9 && text->find_first_not_of("0123456789") == std::string::npos;
  const long value = digits ? std::strtol(text->c_str(), nullptr, 10) : -1;
  if (!digits || value < lo || value > hi)
    fail("{}='{}' is not valid: it takes {}, a whole number from {} to {}", name, *text, meaning, lo, hi);
  return static_cast<int>(value);
}

}  // namespace kiln::cuda
