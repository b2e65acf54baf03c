#pragma once
// The options `kiln train` and `kiln bench` share for where the work runs: the CPU kernels'
// threads and the CUDA backend's settings (kiln::CudaOptions).
#include <CLI/CLI.hpp>

#include <array>

#include "kiln/options.h"

namespace kiln::cli {

// Room for the numbers of the CUDA settings, one slot per row of the table (a file row's unused).
inline constexpr int kMaxCudaOptionNumbers = 32;

struct BackendArgs {
  // The CUDA settings the flags ask for: the files bound to cuda's fields, the switches and counts to
  // `numbers` at their row of the table, put into their fields by cuda_options().
  CudaOptions cuda;
  std::array<int, kMaxCudaOptionNumbers> numbers{};
  int threads = 1;  // --threads; set to kiln::threads() before the option is added, for --help
  int cpu_kernels = 0;  // --cpu-kernels: CpuOptions::kernels (0: as they are)
  BackendArgs();
};

// --threads: the CPU kernels' thread pool (kiln/threads.h), 1 to kiln::max_threads(); the row of
// ir/cpu_option_table.h.
void add_threads_option(CLI::App* app, BackendArgs& a);

// --cpu-kernels onednn|reference (or 1|2): CpuOptions::kernels, the row of ir/cpu_option_table.h.
void add_cpu_kernels_option(CLI::App* app, BackendArgs& a);

// The CPU settings the options ask for (CompileOptions::cpu).
CpuOptions cpu_options(const BackendArgs& a);

// A flag for every row of ir/cuda_option_table.h (--cudnn-tune 0|1, --tune-plans N, --plan-cache
// FILE, ...), each with its range and variable in its help, and --no-cudnn-tune, --cudnn-tune 0's
// short form.
void add_cuda_options(CLI::App* app, BackendArgs& a);

// The CUDA settings the options ask for.
CudaOptions cuda_options(const BackendArgs& a);

}  // namespace kiln::cli
