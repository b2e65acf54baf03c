// cuDNN graph-API convolutions: the graph cache, its plan choice (from the plan cache file or by
// tuning) and runs. The graphs themselves are defined by the op families that use them
// (ops/<family>/*_cudnn_graphs_cuda.cpp, with the toolkit of cudnn_graph_defs.cpp), plans tuned in
// cudnn_plan_tuning.cpp and replayed from the plan cache in cudnn_plan_replay.cpp.
#include "runtime/cuda/cudnn_graphs.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>

#include "kiln/error.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cudnn_graph_defs.h"
#include "runtime/cuda/cudnn_plan_replay.h"
#include "runtime/cuda/cudnn_plan_tuning.h"
#include "runtime/cuda/plan_cache.h"

namespace kiln::cuda {

using namespace detail;

struct CudnnGraphs::Entry {
  std::unique_ptr<NotedGraph> graph;  // null when unsupported
  std::string error;                  // why unsupported
  PlanChoice choice;
  std::vector<int64_t> uids;  // the variant pack's user tensors, in the order execute wants them
};

namespace {

int current_device(const std::string& where) {
  int device = 0;
  KILN_CUDA(cudaGetDevice(&device), where);
  return device;
}

}  // namespace

// ---- public API --------------------------------------------------------------------------------

ConvProblem make_conv_problem(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t r, int64_t s,
                              int64_t stride, int64_t pad, DType io) {
  return make_conv_problem(n, h, w, c, k, r, s, ConvWindow::square(int(stride), int(pad)), io);
}

ConvProblem make_conv_problem(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t r, int64_t s,
                              const ConvWindow& win, DType io) {
  ConvProblem p;
  p.n = n, p.h = h, p.w = w, p.c = c, p.k = k, p.r = r, p.s = s, p.win = win, p.io = io;
  if (win.stride_h > 0 && win.stride_w > 0) {  // else left 0, which validate_problem refuses
    p.ho = win.out_h(h, r);
    p.wo = win.out_w(w, s);
  }
  return p;
}

std::string conv_problem_str(const ConvProblem& p) {
  const ConvWindow& v = p.win;
  std::string window = v.stride_h == v.stride_w ? fmt::format("stride {}", v.stride_h)
                                                : fmt::format("stride {}x{}", v.stride_h, v.stride_w);
  if (v.pad_top == v.pad_left && v.pad_top == v.pad_bottom && v.pad_top == v.pad_right)
    window += fmt::format(" pad {}", v.pad_top);
  else
    window += fmt::format(" pad t{} l{} b{} r{}", v.pad_top, v.pad_left, v.pad_bottom, v.pad_right);
  if (v.dilation_h != 1 || v.dilation_w != 1) window += fmt::format(" dilation {}x{}", v.dilation_h, v.dilation_w);
  if (v.groups != 1) window += fmt::format(" groups {}", v.groups);
  return fmt::format("N={} {}x{} C={} -> K={} {}x{} {} out {}x{} {}", p.n, p.h, p.w, p.c, p.k, p.r, p.s, window,
                     p.ho, p.wo, dtype_name(p.io));
}

CudnnGraphsOptions cudnn_graphs_options(const CudaOptions& cuda) {
  CudnnGraphsOptions o;
  o.tune = cuda.tune;
  o.max_plans_tuned = cuda.tune_plans;
  o.tune_budget_s = cuda.tune_budget_ms * 1e-3;
  if (cuda.plan_cache == "none") {
    o.plan_cache.clear();
  } else if (cuda.plan_cache.empty()) {
    o.plan_cache = default_plan_cache_path();
    o.plan_cache_is_default = true;
  } else {
    o.plan_cache = cuda.plan_cache;
  }
  o.allow_tf32 = cuda.conv_tf32;
  o.prefer_deterministic = cuda.deterministic;
  o.max_workspace_bytes = int64_t(cuda.workspace_mib) << 20;
  o.timed_runs = cuda.tune_runs;
  return o;
}

CudnnGraphs::CudnnGraphs(CudnnGraphsOptions options) : options_(options) {
  options_.timed_runs = std::max(1, options_.timed_runs);
  device_ = current_device("CudnnGraphs");
  KILN_CUDA(cudnnCreate(&handle_), "CudnnGraphs");
  if (!options_.plan_cache.empty()) {
    try {
      plan_cache_ = std::make_unique<PlanCache>(options_.plan_cache);
    } catch (const Error& e) {
      // A file the user named is theirs to mend; the default one is only a speed-up.
      if (!options_.plan_cache_is_default) throw;
      std::fprintf(stderr, "kiln: warning: running without the plan cache: %s\n", e.what());
    }
    device_tag_ = device_tag(device_);
  }
}

void CudnnGraphs::update_plan_cache(const std::string& key, const CachedPlan* plan) {
  try {
    if (plan)
      plan_cache_->store(key, *plan);
    else
      plan_cache_->forget(key);
  } catch (const Error& e) {
    if (!options_.plan_cache_is_default) throw;
    std::fprintf(stderr, "kiln: warning: the plan cache cannot be written, so this run goes on without it: %s\n",
                 e.what());
    plan_cache_.reset();
  }
}

CudnnGraphs::~CudnnGraphs() {
  cache_.clear();  // plans before the handle they were built with
  if (tune_stream_) cudaStreamDestroy(tune_stream_);
  if (handle_) cudnnDestroy(handle_);
}

std::string CudnnGraphs::plan_cache_key(const CudnnGraphDef& graph, const ConvProblem& p) const {
  // Everything that decides which plans may be chosen: the GPU and libraries, the graph, and the
  // options that filter plans.
  return fmt::format("{} | {} {} | tf32={} deterministic={} workspace<={}", device_tag_, graph.name,
                     conv_problem_str(p), options_.allow_tf32, options_.prefer_deterministic,
                     options_.max_workspace_bytes);
}

CudnnGraphs::Key CudnnGraphs::key(const CudnnGraphDef& graph, const ConvProblem& p, int device) {
  const ConvWindow& v = p.win;
  return {&graph,
          {p.n, p.h, p.w, p.c, p.k, p.r, p.s, v.stride_h, v.stride_w, v.pad_top, v.pad_left, v.pad_bottom, v.pad_right,
           v.dilation_h, v.dilation_w, v.groups, p.ho, p.wo, int64_t(p.io), device}};
}

CudnnGraphs::Entry& CudnnGraphs::get_or_build(const CudnnGraphDef& graph, const ConvProblem& p) {
  validate_problem(graph, p);
  const std::string where = fmt::format("cuDNN graph {} for {}", graph.name, conv_problem_str(p));
  const int device = current_device(where);
  if (device != device_)
    fail("{}: the cuDNN handle belongs to device {} but device {} is current; use one CudnnGraphs per device",
         where, device_, device);
  Key k = key(graph, p, device);
  auto it = cache_.find(k);
  if (it != cache_.end()) return *it->second;

  // The name keys the plan cache file and the tune records: two definitions sharing one would
  // replay each other's plans.
  const auto named = names_.emplace(graph.name, &graph).first;
  if (named->second != &graph)
    fail("{}: another cuDNN graph definition already has the name {}; each graph needs its own name", where,
         graph.name);
  ++builds_;
  auto entry = std::make_unique<Entry>();
  // A fresh graph with its tensors and nodes (a failed plan replay leaves its plan in the old one).
  auto define = [&] {
    entry->graph = std::make_unique<NotedGraph>();
    entry->graph->set_io_data_type(fe_dtype(p.io))
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    try {
      graph.define(p, *entry->graph);
    } catch (const std::exception& e) {
      entry->error = fmt::format("defining the graph failed: {}", e.what());
    }
  };
  define();
  const auto start = std::chrono::steady_clock::now();
  if (entry->error.empty()) {
    const std::string cache_key = plan_cache_ ? plan_cache_key(graph, p) : std::string();
    auto cached = plan_cache_ ? plan_cache_->find(cache_key) : std::nullopt;
    // Exhaustive tuning asked for: a choice that bounded tuning cached is tuned again (and replaced).
    const bool exhaustive = options_.tune && options_.max_plans_tuned == 0 && options_.tune_budget_s == 0;
    if (cached && exhaustive && !cached->exhaustive) cached.reset();
    if (cached) {
      entry->choice = replay_plan(*entry->graph, handle_, options_, *cached, entry->uids);
      if (!entry->choice.supported) {
        std::fprintf(stderr, "kiln: %s: the cached plan %s no longer builds (%s); tuning again\n", where.c_str(),
                     cached->name.c_str(), entry->choice.why_not.c_str());
        update_plan_cache(cache_key, nullptr);
        define();
      }
    }
    if (entry->error.empty() && !entry->choice.supported) {
      if (options_.tune && !tune_stream_)
        KILN_CUDA(cudaStreamCreateWithFlags(&tune_stream_, cudaStreamNonBlocking), where);
      entry->choice = choose_plan(*entry->graph, handle_, tune_stream_, p.io, options_, entry->uids);
      const PlanChoice& c = entry->choice;
      if (c.supported && plan_cache_ && c.plans_tried > 0 && !c.plan_name.empty()) {
        const CachedPlan tuned{c.plan_name, c.best_plan_ms, c.workspace, c.exhaustive};
        update_plan_cache(cache_key, &tuned);
      }
    }
    if (entry->error.empty() && !entry->choice.supported) entry->error = entry->choice.why_not;
  }
  if (!entry->error.empty()) {
    entry->graph.reset();
  } else {
    const PlanChoice& c = entry->choice;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    records_.push_back(TuneRecord{graph.name, p, c.plans_tried, c.first_plan_ms, c.best_plan_ms, c.workspace,
                                  c.plans_offered, c.plan_name, c.deterministic, c.from_cache, c.exhaustive, seconds});
  }
  return *cache_.emplace(std::move(k), std::move(entry)).first->second;
}

std::string CudnnGraphs::progress() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t tuned = 0, cached = 0;
  for (const TuneRecord& r : records_) tuned += r.plans_tried > 0 && !r.from_cache, cached += r.from_cache;
  return fmt::format("cuDNN graphs: {} ({} tuned, {} from the plan cache)", records_.size(), tuned, cached);
}

size_t CudnnGraphs::prepare(const CudnnGraphDef& graph, const ConvProblem& problem) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = get_or_build(graph, problem);
  if (!e.graph)
    fail("cuDNN graph {} is not supported for {} (check supported() and fall back to CONV_FPROP plus separate "
         "kernels): {}",
         graph.name, conv_problem_str(problem), e.error);
  return e.choice.workspace;
}

double CudnnGraphs::plan_ms(const CudnnGraphDef& graph, const ConvProblem& problem) {
  prepare(graph, problem);
  std::lock_guard<std::mutex> lock(mutex_);
  return get_or_build(graph, problem).choice.best_plan_ms;
}

bool CudnnGraphs::supported(const CudnnGraphDef& graph, const ConvProblem& problem) {
  try {
    prepare(graph, problem);
    return true;
  } catch (const Error&) {
    return false;
  }
}

void CudnnGraphs::run(const CudnnGraphDef& graph, const ConvProblem& p, const Pointers& ptr, void* workspace,
                      cudaStream_t stream, const std::string& where) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(key(graph, p, device_));
  if (it == cache_.end() || !it->second->graph)
    fail("{}: cuDNN graph {} for {} was not prepared{}; call prepare() first (never under CUDA Graph capture)",
         where, graph.name, conv_problem_str(p), it == cache_.end() ? "" : " (it is not supported)");
  Entry& e = *it->second;
  if (e.choice.workspace > 0 && workspace == nullptr)
    fail("{}: cuDNN graph {} needs a {}-byte workspace but got none", where, graph.name, e.choice.workspace);

  std::array<void*, 16> ptrs{};  // no allocation per run; a graph has at most 10 user tensors
  if (e.uids.size() > ptrs.size()) fail("{}: cuDNN graph {} has too many tensors", where, graph.name);
  size_t count = 0;
  for (int64_t uid : e.uids) {
    const void* v = nullptr;
    const char* name = "?";
    switch (uid) {
      case UID_X: v = ptr.x, name = "x"; break;
      case UID_W: v = ptr.w, name = "w"; break;
      case UID_Y: v = ptr.y, name = "y"; break;
      case UID_DY: v = ptr.dy, name = "dy"; break;
      case UID_DX: v = ptr.dx, name = "dx"; break;
      case UID_DW: v = ptr.dw, name = "dw"; break;
      case UID_SUM: v = ptr.sum, name = "sum"; break;
      case UID_SQ_SUM: v = ptr.sq_sum, name = "sq_sum"; break;
      case UID_SCALE: v = ptr.scale, name = "scale"; break;
      case UID_SHIFT: v = ptr.shift, name = "shift"; break;
      default: fail("{}: cuDNN graph {} has an unexpected tensor uid {}", where, graph.name, uid);
    }
    if (v == nullptr) fail("{}: cuDNN graph {} needs pointer '{}' but it is null", where, graph.name, name);
    ptrs[count++] = const_cast<void*>(v);
  }
  KILN_CUDA(cudnnSetStream(handle_, stream), where);
  fe::error_t status;
  try {
    status = e.graph->execute_plan_at_index(handle_, ptrs.data(), static_cast<int>(count), workspace,
                                            e.choice.plan_index);
  } catch (const std::exception& ex) {
    fail("{}: cuDNN graph {} for {} failed to execute: {}", where, graph.name, conv_problem_str(p), ex.what());
  }
  if (status.is_bad())
    fail("{}: cuDNN graph {} for {} failed to execute: {}", where, graph.name, conv_problem_str(p),
         status.get_message());
}

std::vector<TuneRecord> CudnnGraphs::tune_records() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return records_;
}

size_t CudnnGraphs::graphs_built() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return builds_;
}

PlanChoice CudnnGraphs::probe(const std::function<void(fe::graph::Graph&)>& define, DType io) {
  std::lock_guard<std::mutex> lock(mutex_);
  NotedGraph g;
  g.set_io_data_type(fe_dtype(io))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  try {
    define(g);
  } catch (const std::exception& e) {
    PlanChoice c;
    c.why_not = fmt::format("defining the graph failed: {}", e.what());
    return c;
  }
  if (options_.tune && !tune_stream_)
    KILN_CUDA(cudaStreamCreateWithFlags(&tune_stream_, cudaStreamNonBlocking), "cuDNN probe");
  std::vector<int64_t> uids;
  return choose_plan(g, handle_, tune_stream_, io, options_, uids);
}

}  // namespace kiln::cuda
