#pragma once
// The options `kiln train`, `kiln bench` and `kiln plan` share for where the work runs: the CPU
// kernels' settings (kiln::CpuOptions) and the CUDA backend's (kiln::CudaOptions), made from their
// rows (settings/cpu_settings.h, settings/cuda_settings.h).
#include <CLI/CLI.hpp>

#include "kiln/options.h"

namespace kiln::cli {

// The settings the flags ask for, written into the fields their rows name.
struct BackendArgs {
  // --threads and --cpu-kernels. cpu.threads is set to kiln::threads() before the option is added
  // (--help shows it): the flag has no 0, the pool's size being its default already.
  CpuOptions cpu;
  CudaOptions cuda;  // every row of settings/cuda_settings.h, --no-cudnn-tune and --tune
};

// --threads: the CPU kernels' thread pool (kiln/threads.h), 1 to kiln::max_threads(); the row
// "threads" of settings/cpu_settings.h.
void add_threads_option(CLI::App* app, BackendArgs& a);

// --cpu-kernels onednn|reference|onednn-bf16 (or 1|2|3): the row "kernels" of
// settings/cpu_settings.h.
void add_cpu_kernels_option(CLI::App* app, BackendArgs& a);

// A flag for every row of settings/cuda_settings.h (--cudnn-tune 0|1, --tune-plans N, --plan-cache
// FILE, ...), each with its range and variable in its help; --no-cudnn-tune, --cudnn-tune 0's
// short form; and --tune bounded|exhaustive.
void add_cuda_options(CLI::App* app, BackendArgs& a);

}  // namespace kiln::cli
