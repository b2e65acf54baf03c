#include "runtime/cuda/cudnn_graph_caches.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "runtime/cuda/cudnn_graphs.h"

namespace kiln::cuda {
namespace {

using GraphCacheKey = std::tuple<int, bool, bool, bool, int64_t, int, int, double, std::string>;
using GraphCaches = std::map<GraphCacheKey, std::shared_ptr<CudnnGraphs>>;

// Never destroyed as statics are: release_graph_caches empties it at exit.
GraphCaches& graph_caches() {
  static auto* caches = new GraphCaches;
  return *caches;
}
std::mutex& graph_caches_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}

// Destroys the caches (and their cuDNN handles) at exit, before cuDNN's own teardown: the first
// cudnnCreate registers that teardown, so this handler, registered after it, runs first. A handle
// destroyed after cuDNN's teardown keeps its device memory (compute-sanitizer's leak check: 25 KiB
// and two 4-byte buffers per handle), which a static map, built before the first handle, did.
// Backends still alive at exit keep their cache to the end.
void release_graph_caches() {
  std::lock_guard<std::mutex> lock(graph_caches_mutex());
  graph_caches().clear();
}

}  // namespace

std::shared_ptr<CudnnGraphs> shared_cudnn_graphs(int device, const CudaOptions& options) {
  const CudnnGraphsOptions o = cudnn_graphs_options(options);
  std::lock_guard<std::mutex> lock(graph_caches_mutex());
  auto& cache = graph_caches()[GraphCacheKey{device, o.tune, o.allow_tf32, o.prefer_deterministic,
                                             o.max_workspace_bytes, o.timed_runs, o.max_plans_tuned, o.tune_budget_s,
                                             o.plan_cache}];
  if (!cache) {
    cache = std::make_shared<CudnnGraphs>(o);
    static const bool registered = std::atexit(release_graph_caches) == 0;
    (void)registered;
  }
  return cache;
}

}  // namespace kiln::cuda
