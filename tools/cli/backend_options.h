#pragma once
// The options `kiln train` and `kiln bench` share for where the work runs: the CPU kernels'
// threads and the CUDA backend's settings (kiln::CudaOptions).
#include <CLI/CLI.hpp>

#include "kiln/options.h"

namespace kiln::cli {

struct BackendArgs {
  CudaOptions cuda;     // --no-cudnn-tune ... --pipeline-chunks (add_cuda_options)
  int side_stream = 1;  // --side-stream 0|1, into cuda.side_stream
  int overlap_ops = 1;  // --overlap-ops 0|1, into cuda.overlap_ops
  int conv_tf32 = 0;    // --conv-tf32 0|1, into cuda.conv_tf32
  int cuda_graphs = 1;  // --cuda-graphs 0|1, into cuda.graphs
  int threads = 1;      // --threads; set to kiln::threads() before the option is added, for --help
};

// --threads: the CPU kernels' thread pool (kiln/threads.h), 1 to kiln::max_threads().
void add_threads_option(CLI::App* app, BackendArgs& a);

// --no-cudnn-tune, --tune-plans, --plan-cache, --tune-log, --side-stream, --overlap-ops,
// --cuda-graphs, --conv-tf32, --pipeline-chunks.
void add_cuda_options(CLI::App* app, BackendArgs& a);

// The CUDA settings the options ask for: those add_cuda_options filled, with the 0|1 flags put in
// their fields.
CudaOptions cuda_options(const BackendArgs& a);

}  // namespace kiln::cli
