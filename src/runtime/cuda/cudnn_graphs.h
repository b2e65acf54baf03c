#pragma once
// cuDNN graph-API convolutions (plain and fused) with a plan cache and engine autotuning.
//
// Layouts are the project's: activations NHWC, filters KRSC. cuDNN sees them as dims {N,C,H,W}
// with NHWC strides and filters as dims {K,C/groups,R,S} with KRSC strides (cuDNN infers the groups
// from C / the filter's C); compute is fp32; per-channel
// statistics, scale and shift are fp32. Every pointer handed to run() must be 16-byte aligned
// (cudnn-frontend assumes that alignment when it picks engines and rejects misaligned pointers).
//
// This header does not include cudnn_frontend.h (very slow to compile): only the cudnn_*.cpp files
// of this folder and the families' *_cudnn_graphs_cuda.cpp (through cudnn_graph_defs.h) and
// tools/cudnn_probe.cpp do.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/conv_window.h"
#include "kiln/dtype.h"
#include "kiln/options.h"

namespace cudnn_frontend::graph {
class Graph;
}

namespace kiln::cuda {

class PlanCache;
struct CachedPlan;

// One 2-D convolution: x (n,h,w,c) NHWC, w (k,r,s,c/groups) KRSC, y (n,ho,wo,k) NHWC, under any
// window (core/conv_window.h: strides, the padding of each side, dilation, groups; PyTorch's
// nn.Conv2d). ho/wo must equal win.out_h(h, r) / win.out_w(w, s). cuDNN runs every window; kiln's
// own convolution kernels only square ones (ops/conv/conv_cuda.h, conv_shape).
struct ConvProblem {
  int64_t n = 0, h = 0, w = 0, c = 0, k = 0, r = 0, s = 0;
  ConvWindow win;
  int64_t ho = 0, wo = 0;
  DType io = DType::F16;  // dtype of x, w, y, dy, dx, dw (F32, F16 or BF16)

  int64_t filter_c() const { return c / win.groups; }  // each filter's channels
};

// Fill ho/wo from the other fields: a square window (one stride, one padding on every side, no
// dilation, one group: CBR, conv_bn and kiln's own kernels), or any window.
ConvProblem make_conv_problem(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t r, int64_t s,
                              int64_t stride, int64_t pad, DType io);
ConvProblem make_conv_problem(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t r, int64_t s,
                              const ConvWindow& win, DType io);
// "N=.. HxW=.. C=.. -> K=.. RxS=.. stride .. pad .. out HoxWo f16"; a window that is not square
// writes what differs: "stride 2x1" (h x w), "pad t1 l0 b2 r1", "dilation 2x2", "groups 4". Part
// of every plan cache key, so a square problem keeps the text (and the cached plans) it always had.
std::string conv_problem_str(const ConvProblem& p);

// One cuDNN graph over a ConvProblem: what the cache below builds, tunes and runs. The graphs
// live with the op family that uses them (ops/conv/conv_cudnn_graphs_cuda.h: CONV_FPROP,
// CONV_FPROP_GENSTATS, CONV_DGRAD, CONV_WGRAD; ops/cbr/cbr_cudnn_graphs_cuda.h:
// CONV_SCALE_SHIFT_RELU), each a `const CudnnGraphDef` with static storage, so adding a fused
// graph touches only its family's folder. Their definitions include cudnn_frontend.h through
// cudnn_graph_defs.h (its tensor toolkit); this header only forward-declares the graph type.
struct CudnnGraphDef {
  // Unique, and part of every plan cache key, tune record and error message: renaming a graph
  // orphans the plans that earlier runs stored for it.
  const char* name;
  // Adds the graph's tensors and nodes for `p` to an empty graph whose io dtype is p.io and whose
  // intermediate and compute dtypes are fp32. Its user tensors take the fixed uids of
  // cudnn_graph_defs.h (Uid), which run() maps to the Pointers fields of the same names; it may
  // throw (the problem is then reported unsupported with its message).
  void (*define)(const ConvProblem& p, cudnn_frontend::graph::Graph& g);
};

// Device pointers for one run; each graph reads only the ones its definition names (the rest may be
// null).
struct Pointers {
  const void* x = nullptr;
  const void* w = nullptr;
  void* y = nullptr;
  const void* dy = nullptr;
  void* dx = nullptr;
  void* dw = nullptr;
  float* sum = nullptr;
  float* sq_sum = nullptr;
  const float* scale = nullptr;
  const float* shift = nullptr;
};

// Taken as given: the environment is not read here. The CUDA backend fills tune, max_plans_tuned
// and plan_cache from its CudaOptions (cudnn_graphs_options below), after the KILN_* overrides.
struct CudnnGraphsOptions {
  // Time every plan the heuristics offer and keep the fastest; false keeps the heuristics' first
  // usable plan.
  bool tune = true;
  // fp32 graphs: false keeps only plans without the TENSOR_CORE / DOWN_CONVERT_INPUTS notes, i.e. no
  // TF32, so fp32 results match a true fp32 convolution to ~1e-6. true lets cuDNN use TF32 (~1e-3).
  bool allow_tf32 = false;
  // Plans with a NONDETERMINISTIC note are used only when no deterministic plan builds.
  bool prefer_deterministic = true;
  int64_t max_workspace_bytes = int64_t{1} << 30;  // plans needing more are skipped
  int timed_runs = 5;                              // per plan, after one warm-up; the median counts
  // 0: build and time every plan offered; N: only the first N that build, in heuristic order (building
  // dominates tuning time: about 5 s per graph at batch 256 on an H200 with every plan).
  int max_plans_tuned = 0;
  // Seconds one graph's tuning may spend building plans: once they are spent, the plans built so far
  // are timed and no more are built (at least one always is). 0: no limit.
  double tune_budget_s = 0;
  // File of tuned plan choices shared by processes (plan_cache.h): a graph found there rebuilds
  // the recorded plan instead of tuning, and every tuned choice is added. Empty: no file.
  std::string plan_cache;
  // plan_cache is the user's cache folder's (the default) rather than a file the user named: one
  // that cannot be read or written is warned about and left out, not an error.
  bool plan_cache_is_default = false;
};

// The graph options of a backend's CudaOptions (tune, tune_plans, tune_budget_ms, plan_cache,
// conv_tf32, deterministic, workspace_mib, tune_runs).
CudnnGraphsOptions cudnn_graphs_options(const CudaOptions& cuda);

// What engine choice found for one graph.
struct TuneRecord {
  std::string kind;  // the graph's CudnnGraphDef::name
  ConvProblem problem;
  int plans_tried = 0;         // plans built and timed (0 when tuning is off)
  double first_plan_ms = 0;    // heuristics' first usable plan (0 when not timed)
  double best_plan_ms = 0;     // the plan kept (0 when not timed)
  size_t workspace = 0;        // bytes the kept plan needs
  int plans_offered = 0;       // engine configs from heuristics A + FALLBACK
  std::string plan_name;       // cuDNN's name of the kept plan
  bool deterministic = true;   // false when only NONDETERMINISTIC plans built
  bool from_cache = false;     // rebuilt from the plan cache file (best_plan_ms: its recorded time)
  bool exhaustive = false;     // every plan that builds was timed (no count or time bound cut it short)
  double seconds = 0;          // wall time spent choosing the plan (building, timing or replaying)
};

// Result of building and tuning an arbitrary frontend graph (used by tools/cudnn_probe.cpp).
struct PlanChoice {
  bool supported = false;
  std::string why_not;  // frontend message when !supported
  int64_t plan_index = -1;
  int plans_offered = 0, plans_built = 0, plans_tried = 0;
  double first_plan_ms = 0, best_plan_ms = 0;
  size_t workspace = 0;
  std::string plan_name;
  bool deterministic = true;
  bool from_cache = false;
  bool exhaustive = false;  // tuned over every plan that builds (see TuneRecord)
};

class CudnnGraphs {
 public:
  // Creates the cuDNN handle on the current device, with these options for its whole life.
  explicit CudnnGraphs(CudnnGraphsOptions options = {});
  ~CudnnGraphs();
  CudnnGraphs(const CudnnGraphs&) = delete;
  CudnnGraphs& operator=(const CudnnGraphs&) = delete;

  // Builds `graph` for `problem` unless cached, choosing its plan (timing plans on the device when
  // tuning is on: it allocates temporary buffers and synchronizes, so never call it under CUDA
  // Graph capture). Returns the workspace bytes run() needs. Throws kiln::Error naming the graph
  // and the shape when the problem is invalid or cuDNN supports no plan for it, or when another
  // definition already used the graph's name.
  size_t prepare(const CudnnGraphDef& graph, const ConvProblem& problem);
  // Whether prepare() would succeed (builds and caches, failures included).
  bool supported(const CudnnGraphDef& graph, const ConvProblem& problem);
  // The measured time of the plan prepare() kept, in ms: timed by tuning or recorded in the plan
  // cache; 0 when it was not timed (tuning off). Prepares the graph; throws as prepare() does.
  double plan_ms(const CudnnGraphDef& graph, const ConvProblem& problem);
  // Enqueues the prepared graph on `stream` (capturable: no allocation, no sync, no tuning).
  // `workspace` must hold prepare()'s bytes. Throws kiln::Error prefixed with `where`.
  void run(const CudnnGraphDef& graph, const ConvProblem& problem, const Pointers& pointers, void* workspace,
           cudaStream_t stream, const std::string& where);

  std::vector<TuneRecord> tune_records() const;
  size_t graphs_built() const;  // graph builds so far (cache misses), for tests and logs
  // "cuDNN graphs: 23 (12 tuned, 11 from the plan cache)": the graphs this cache holds, for the
  // progress line while a program is prepared.
  std::string progress() const;
  cudnnHandle_t handle() const { return handle_; }
  int device() const { return device_; }
  const CudnnGraphsOptions& options() const { return options_; }

  // For tools: `define` adds tensors and nodes to an empty graph whose io dtype is `io`, intermediate
  // and compute dtypes fp32. The graph is built on this handle, its plans chosen as prepare() does
  // (timed on random buffers for every non-virtual tensor), and the result reported. Not cached.
  PlanChoice probe(const std::function<void(cudnn_frontend::graph::Graph&)>& define, DType io);

  struct Entry;  // a built graph and its chosen plan (defined in cudnn_graphs.cpp)

 private:
  // The definition (its address: the name is checked unique when a graph is built) and the
  // problem's fields and device.
  using Key = std::pair<const CudnnGraphDef*, std::vector<int64_t>>;
  static Key key(const CudnnGraphDef& graph, const ConvProblem& problem, int device);
  Entry& get_or_build(const CudnnGraphDef& graph, const ConvProblem& problem);
  std::string plan_cache_key(const CudnnGraphDef& graph, const ConvProblem& problem) const;
  // Adds a tuned choice to the plan cache (`plan`), or drops one that no longer builds (null); a
  // default cache that cannot be written is left out from then on.
  void update_plan_cache(const std::string& key, const CachedPlan* plan);

  CudnnGraphsOptions options_;
  int device_ = 0;
  cudnnHandle_t handle_ = nullptr;
  cudaStream_t tune_stream_ = nullptr;
  mutable std::mutex mutex_;
  std::map<Key, std::unique_ptr<Entry>> cache_;
  std::map<std::string, const CudnnGraphDef*> names_;  // each name built so far, and its definition
  std::vector<TuneRecord> records_;
  size_t builds_ = 0;
  std::unique_ptr<PlanCache> plan_cache_;  // null without a plan cache file
  std::string device_tag_;  // GPU, compute capability, driver, cuDNN, frontend and kiln versions
};

}  // namespace kiln::cuda
