#pragma once
// `kiln bench`: a whole network's training steps on synthetic data already on the device
// (kiln/bench.h): images/s, memory and the time to the first step, printed and optionally
// appended as one JSON line for bench/report_models.py.
#include <CLI/CLI.hpp>

#include <string>

#include "cli/backend_options.h"
#include "cli/common_options.h"
#include "cli/data_parallel_options.h"
#include "kiln/bench.h"

namespace kiln::cli {

struct BenchArgs {
  // --steps, --warmup, --seed, --profile, --peak-tflops, --peak-tbps and --json: their rows are
  // cli/bench_settings.h's.
  BenchOptions bench;
  std::string json;     // --json FILE
  int image_size = 0;   // --image-size: the synthetic images' side; 0: the model's input
  BackendArgs backend;  // --threads and the CUDA backend's options
  DataParallelArgs parallel;  // --gpus and the other launch options
};

// The "bench" subcommand with `common` (shared with plan and train) and its own options in `args`.
// args.backend.cpu.threads must hold its default (kiln::threads()) already: --help shows it.
CLI::App* add_bench_command(CLI::App& app, CommonOptions& common, BenchArgs& args);
int run_bench(const CommonOptions& common, const BenchArgs& args);

}  // namespace kiln::cli
