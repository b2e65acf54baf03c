#pragma once
// One cuDNN graph cache per device and graph options for the whole process: every executable on a
// device shares the built and tuned plans, so a shape is tuned once however many programs use it
// (programs asking for other graph options — tuning and its bounds, TF32, determinism, workspace,
// timed runs, plan cache file — get a cache of their own: the cache applies its own options to
// every graph).
#include <memory>

#include "kiln/options.h"

namespace kiln::cuda {

class CudnnGraphs;

// The cache of GPU `device` for `options`' graph options (cudnn_graphs_options), made at the first
// call. The caches are destroyed at exit, before cuDNN's own teardown.
std::shared_ptr<CudnnGraphs> shared_cudnn_graphs(int device, const CudaOptions& options);

}  // namespace kiln::cuda
