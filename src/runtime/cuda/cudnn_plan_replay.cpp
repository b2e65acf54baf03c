// Plan choice from the plan cache file: replaying a recorded plan, and the device tag of the keys.
#include "runtime/cuda/cudnn_plan_replay.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <exception>

#include "kiln/error.h"
#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda::detail {

PlanChoice replay_plan(NotedGraph& g, cudnnHandle_t handle, const CudnnGraphsOptions& o, const CachedPlan& cached,
                       std::vector<int64_t>& uids_out) {
  PlanChoice c;
  auto step = [&](fe::error_t status, const char* what) { return frontend_step(status, what, c); };
  try {
    if (!step(g.validate(), "validate") || !step(g.build_operation_graph(handle), "build_operation_graph") ||
        !step(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans"))
      return c;
    const int64_t count = g.get_execution_plan_count();
    int64_t index = -1;
    for (int64_t i = 0; i < count && index < 0; ++i) {
      std::string name;
      if (g.get_plan_name_at_index(i, name).is_good() && name == cached.name) index = i;
    }
    if (index < 0) {
      c.why_not = fmt::format("none of the {} engine configurations offered is named {}", count, cached.name);
      return c;
    }
    if (!step(g.check_support(), "check_support") || !step(g.build_plan_at_index(index), "build_plan_at_index")) return c;
    int64_t workspace = 0;
    if (!step(g.get_workspace_size_plan_at_index(index, workspace), "get_workspace_size")) return c;
    if (workspace > o.max_workspace_bytes) {
      c.why_not = fmt::format("it needs {} bytes of workspace, over the limit of {}", workspace, o.max_workspace_bytes);
      return c;
    }
    if (!step(g.prepare_variant_pack_template(), "prepare_variant_pack_template")) return c;
    uids_out = g.get_variant_pack_uids_sorted();
    g.release_plans_except(index);
    c.supported = true;
    c.from_cache = true;
    c.plan_index = index;
    c.plans_offered = static_cast<int>(count);
    c.plans_built = 1;
    c.workspace = static_cast<size_t>(workspace);
    c.best_plan_ms = cached.ms;
    c.exhaustive = cached.exhaustive;
    c.plan_name = cached.name;
    c.deterministic = !g.has_note(index, fe::NumericalNote_t::NONDETERMINISTIC);
  } catch (const std::exception& e) {
    c.supported = false;
    c.why_not = e.what();
  }
  return c;
}

// Which GPU and libraries a tuned choice holds for: part of every plan cache key.
std::string device_tag(int device) {
  cudaDeviceProp prop{};
  KILN_CUDA(cudaGetDeviceProperties(&prop, device), "CudnnGraphs");
  int driver = 0;
  KILN_CUDA(cudaDriverGetVersion(&driver), "CudnnGraphs");
  // kiln's version too: a release may define a graph differently under the same name.
  return fmt::format("{} sm{}{} {}SMs driver{} cudnn{} frontend{} kiln{}", prop.name, prop.major, prop.minor,
                     prop.multiProcessorCount, driver, cudnnGetVersion(), CUDNN_FRONTEND_VERSION, KILN_VERSION);
}

}  // namespace kiln::cuda::detail
