#include "cli/backend_options.h"

#include <fmt/format.h>

#include <string>

#include "cli/option_checks.h"
#include "kiln/threads.h"

namespace kiln::cli {

// Data loader workers are not counted in --threads: they sleep while the prefetch queue is full
// and build a batch in a small fraction of a step, and while one runs, the pool's other threads
// take the pieces of the thread it delays (a kernel's pieces go to whichever thread is free).
// The cap is kiln::max_threads(), the one rule of set_threads and KILN_THREADS too.
void add_threads_option(CLI::App* app, BackendArgs& a) {
  const int cap = max_threads(), cores = available_cores();
  app->add_option("--threads", a.threads,
                  fmt::format("threads for the CPU kernels, 1 to {}; default: the cores this process may use, or "
                              "KILN_THREADS",
                              cap))
      ->check(number_in([cap](double v) { return v >= 1 && v <= cap; },
                        fmt::format(">= 1 and at most {} (4 x the {} cores this process may use, at least 64: more "
                                    "threads than cores only take turns on them)",
                                    cap, cores),
                        fmt::format("use e.g. --threads {} (the cores this process may use), or 1 for a single thread",
                                    cores)));
}

// The KILN_* environment variables override these (README.md, GPU). Ranges are checked here, so a
// bad value is an error naming the flag.
void add_cuda_options(CLI::App* app, BackendArgs& a) {
  const std::string group = "CUDA backend (--device cuda; KILN_* variables override these)";
  CLI::Option* no_tune = app->add_flag_callback(
      "--no-cudnn-tune", [&a] { a.cuda.tune = false; },
      "keep cuDNN's first usable plan (or the plan cache's) instead of timing the plans [KILN_CUDNN_TUNE=0]");
  no_tune->group(group);
  app->add_option("--tune-plans", a.cuda.tune_plans,
                  "time only the first N cuDNN plans that build; 0: every plan [KILN_CUDNN_TUNE_PLANS]")
      ->check(CLI::Range(0, 9999))
      ->excludes(no_tune)
      ->type_name("N")
      ->group(group);
  app->add_option("--plan-cache", a.cuda.plan_cache,
                  "file of tuned plan choices: later runs on the same GPU and cuDNN rebuild them without tuning "
                  "[KILN_PLAN_CACHE]")
      ->type_name("FILE")
      ->group(group);
  app->add_option("--tune-log", a.cuda.tune_log, "append what tuning found, one JSON line per graph [KILN_TUNE_LOG]")
      ->type_name("FILE")
      ->group(group);
  app->add_option("--side-stream", a.side_stream,
                  "1: run wgrad beside dgrad on a second stream (default); 0: after it [KILN_SIDE_STREAM]")
      ->check(CLI::Range(0, 1))
      ->type_name("0|1")
      ->group(group);
  app->add_option("--overlap-ops", a.overlap_ops,
                  "1: an op's wgrad may run on beside the next op (default); 0: every op joins its streams "
                  "[KILN_OVERLAP_OPS]")
      ->check(CLI::Range(0, 1))
      ->type_name("0|1")
      ->group(group);
  app->add_option("--cuda-graphs", a.cuda_graphs,
                  "1: replay each step as one captured CUDA Graph (default); 0: launch every op [KILN_CUDA_GRAPHS]")
      ->check(CLI::Range(0, 1))
      ->type_name("0|1")
      ->group(group);
  app->add_option("--conv-tf32", a.conv_tf32,
                  "1: fp32 convolutions may use TF32 tensor cores, as PyTorch's default; 0: true fp32 only "
                  "(default) [KILN_CONV_TF32]")
      ->check(CLI::Range(0, 1))
      ->type_name("0|1")
      ->group(group);
  app->add_option("--pipeline-chunks", a.cuda.pipeline_chunks,
                  "batch slices the CBR backward pipelines its data gradient over; 1: off (default) "
                  "[KILN_PIPELINE_CHUNKS]")
      ->check(CLI::Range(1, 99))
      ->type_name("N")
      ->group(group);
}

CudaOptions cuda_options(const BackendArgs& a) {
  CudaOptions c = a.cuda;
  c.side_stream = a.side_stream == 1;
  c.overlap_ops = a.overlap_ops == 1;
  c.conv_tf32 = a.conv_tf32 == 1;
  c.graphs = a.cuda_graphs == 1;
  return c;
}

}  // namespace kiln::cli
