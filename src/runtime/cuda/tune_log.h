#pragma once
// CudaOptions::tune_log (KILN_TUNE_LOG=<file>, --tune-log): what engine choice found for each
// cuDNN graph, appended to a file as one JSON object a line, for bench/ scripts and for people
// choosing --tune-plans.
#include <string>

#include "runtime/cuda/cudnn_graphs.h"

namespace kiln::cuda {

// Appends the records of `graphs` that no backend has logged yet (a graph cache outlives the
// backends that share it); nothing when `path` is empty. A file that cannot be opened is skipped:
// the log is a by-product, and a destructor calls this.
void append_tune_log(const CudnnGraphs& graphs, const std::string& path);

}  // namespace kiln::cuda
