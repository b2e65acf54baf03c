#pragma once
// Plan choice from the plan cache file (plan_cache.h holds the file format): rebuilding a recorded
// plan instead of tuning, and the device tag that is part of every plan cache key. Only the
// cudnn_*.cpp files of this folder include this header (it pulls in cudnn_frontend.h through
// cudnn_graph_defs.h).
#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/cuda/cudnn_graph_defs.h"
#include "runtime/cuda/plan_cache.h"

namespace kiln::cuda::detail {

// Rebuilds the one plan a plan cache entry names on a graph whose tensors and nodes are defined:
// the heuristics list the same engine configurations as when the entry was tuned, and only the
// one with the cached name is built, untimed. The name, not cudnn-frontend's (engine id, knobs)
// replay, identifies it: engines still use knob types the frontend cannot map back (cuDNN 9.19's
// deprecated LDGA and LDGC, for one), so their choices would not rebuild. Unsupported (why_not
// set) when this cuDNN no longer offers or builds it, e.g. after an upgrade the key did not see.
PlanChoice replay_plan(NotedGraph& g, cudnnHandle_t handle, const CudnnGraphsOptions& o, const CachedPlan& cached,
                       std::vector<int64_t>& uids_out);

// Which GPU and libraries a tuned choice holds for: part of every plan cache key.
std::string device_tag(int device);

}  // namespace kiln::cuda::detail
