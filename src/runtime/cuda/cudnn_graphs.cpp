// cuDNN graph-API convolutions: graph definitions per kind, plan choice (autotuning) and the cache.
// The only library translation unit that includes cudnn_frontend.h.
#include "runtime/cuda/cudnn_graphs.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudnn_frontend.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <random>
#include <unordered_map>

#include "kiln/error.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/env_settings.h"
#include "runtime/cuda/plan_cache.h"

namespace fe = cudnn_frontend;

namespace kiln::cuda {
namespace detail {

// A Graph whose plan list (protected in the frontend) we can read: the numerical notes of each
// engine config tell TF32 and nondeterministic engines apart, and the plans we do not keep can be
// freed (runtime-compiled engines hold device code).
class NotedGraph : public fe::graph::Graph {
 public:
  bool has_note(int64_t index, fe::NumericalNote_t note) const {
    if (index < 0 || static_cast<size_t>(index) >= plans.numeric_notes.size()) return false;
    const auto& notes = plans.numeric_notes[index];
    return std::find(notes.begin(), notes.end(), note) != notes.end();
  }
  void release_plans_except(int64_t keep) {
    for (size_t i = 0; i < plans.execution_plans.size(); ++i)
      if (static_cast<int64_t>(i) != keep) plans.execution_plans[i].reset();
  }
};

}  // namespace detail

using detail::NotedGraph;

struct CudnnGraphs::Entry {
  std::unique_ptr<NotedGraph> graph;  // null when unsupported
  std::string error;                  // why unsupported
  PlanChoice choice;
  std::vector<int64_t> uids;  // the variant pack's user tensors, in the order execute wants them
};

namespace {

// Fixed uids so that run() can map Pointers to the variant pack without looking up tensors.
enum Uid : int64_t { UID_X = 1, UID_W, UID_Y, UID_DY, UID_DX, UID_DW, UID_SUM, UID_SQ_SUM, UID_SCALE, UID_SHIFT };

fe::DataType_t fe_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32: return fe::DataType_t::FLOAT;
    case DType::F16: return fe::DataType_t::HALF;
    case DType::BF16: return fe::DataType_t::BFLOAT16;
    default: fail("cuDNN graphs: dtype {} is not supported (use F32, F16 or BF16)", dtype_name(dtype));
  }
}

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// dims {N,C,H,W} in NHWC memory order.
fe::graph::Tensor_attributes nhwc(const char* name, int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, c, h, w}).set_stride(
      {h * w * c, 1, w * c, c});
}

void make_output_nhwc(const TensorPtr& t, int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  t->set_uid(uid).set_dim({n, c, h, w}).set_stride({h * w * c, 1, w * c, c}).set_output(true);
}

void make_output_channels(const TensorPtr& t, int64_t uid, int64_t k) {
  t->set_uid(uid).set_dim({1, k, 1, 1}).set_stride({k, 1, k, k}).set_data_type(fe::DataType_t::FLOAT).set_output(
      true);
}

// Filter (K,R,S,C) in memory, dims {K,C,R,S} for cuDNN.
fe::graph::Tensor_attributes krsc(const char* name, int64_t uid, const ConvProblem& p) {
  return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({p.k, p.c, p.r, p.s}).set_stride(
      {p.c * p.r * p.s, 1, p.s * p.c, p.c});
}

fe::graph::Tensor_attributes per_channel(const char* name, int64_t uid, int64_t k) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({1, k, 1, 1})
      .set_stride({k, 1, k, k})
      .set_data_type(fe::DataType_t::FLOAT);
}

void define_conv_graph(GraphKind kind, const ConvProblem& p, fe::graph::Graph& g) {
  const std::vector<int64_t> pad{p.pad, p.pad}, stride{p.stride, p.stride}, dilation{1, 1};
  auto W = [&] { return g.tensor(krsc("w", UID_W, p)); };
  auto X = [&] { return g.tensor(nhwc("x", UID_X, p.n, p.c, p.h, p.w)); };
  auto fprop = [&](const TensorPtr& x, const TensorPtr& w) {
    return g.conv_fprop(x, w,
                        fe::graph::Conv_fprop_attributes().set_padding(pad).set_stride(stride).set_dilation(dilation));
  };
  switch (kind) {
    case GraphKind::CONV_FPROP: {
      auto y = fprop(X(), W());
      make_output_nhwc(y, UID_Y, p.n, p.k, p.ho, p.wo);
      return;
    }
    case GraphKind::CONV_FPROP_GENSTATS: {
      auto y = fprop(X(), W());
      make_output_nhwc(y, UID_Y, p.n, p.k, p.ho, p.wo);
      auto [sum, sq_sum] = g.genstats(y, fe::graph::Genstats_attributes().set_name("stats"));
      make_output_channels(sum, UID_SUM, p.k);
      make_output_channels(sq_sum, UID_SQ_SUM, p.k);
      return;
    }
    case GraphKind::CONV_DGRAD: {
      auto dy = g.tensor(nhwc("dy", UID_DY, p.n, p.k, p.ho, p.wo));
      auto dx = g.conv_dgrad(
          dy, W(), fe::graph::Conv_dgrad_attributes().set_padding(pad).set_stride(stride).set_dilation(dilation));
      make_output_nhwc(dx, UID_DX, p.n, p.c, p.h, p.w);
      return;
    }
    case GraphKind::CONV_WGRAD: {
      auto dy = g.tensor(nhwc("dy", UID_DY, p.n, p.k, p.ho, p.wo));
      auto dw = g.conv_wgrad(
          dy, X(), fe::graph::Conv_wgrad_attributes().set_padding(pad).set_stride(stride).set_dilation(dilation));
      dw->set_uid(UID_DW).set_dim({p.k, p.c, p.r, p.s}).set_stride({p.c * p.r * p.s, 1, p.s * p.c, p.c}).set_output(
          true);
      return;
    }
    case GraphKind::CONV_SCALE_SHIFT_RELU: {
      auto conv = fprop(X(), W());  // virtual, fp32 (intermediate dtype)
      auto scale = g.tensor(per_channel("scale", UID_SCALE, p.k));
      auto shift = g.tensor(per_channel("shift", UID_SHIFT, p.k));
      auto scaled = g.pointwise(conv, scale, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
      auto shifted = g.pointwise(scaled, shift, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
      auto y = g.pointwise(shifted, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
      make_output_nhwc(y, UID_Y, p.n, p.k, p.ho, p.wo);
      return;
    }
  }
  fail("cuDNN graphs: unknown graph kind {}", int(kind));
}

void validate_problem(GraphKind kind, const ConvProblem& p) {
  auto bad = [&](const std::string& why) {
    fail("cuDNN graph {}: invalid convolution {}: {}", graph_kind_name(kind), conv_problem_str(p), why);
  };
  if (p.n < 1 || p.h < 1 || p.w < 1 || p.c < 1 || p.k < 1 || p.r < 1 || p.s < 1)
    bad("n, h, w, c, k, r and s must all be at least 1");
  if (p.stride < 1 || p.pad < 0) bad("stride must be at least 1 and pad at least 0");
  const int64_t ho = (p.h + 2 * p.pad - p.r) / p.stride + 1, wo = (p.w + 2 * p.pad - p.s) / p.stride + 1;
  if (p.h + 2 * p.pad < p.r || p.w + 2 * p.pad < p.s) bad("the filter is larger than the padded input");
  if (p.ho != ho || p.wo != wo)
    bad(fmt::format("ho x wo must be {} x {} (use make_conv_problem to fill them)", ho, wo));
  if (p.io != DType::F32 && p.io != DType::F16 && p.io != DType::BF16)
    bad(fmt::format("dtype {} is not supported (use F32, F16 or BF16)", dtype_name(p.io)));
}

std::string frontend_message(fe::error_t status) { return status.get_message(); }

// ---- random device buffers for timing ------------------------------------------------------------

size_t fe_dtype_bytes(fe::DataType_t t) {
  switch (t) {
    case fe::DataType_t::FLOAT:
    case fe::DataType_t::INT32: return 4;
    case fe::DataType_t::DOUBLE:
    case fe::DataType_t::INT64: return 8;
    case fe::DataType_t::HALF:
    case fe::DataType_t::BFLOAT16: return 2;
    default: return 1;  // BOOLEAN and 8-bit types; bit-packed ones get more than they need
  }
}

// Owns device buffers; frees them however tuning ends.
class ScratchBuffers {
 public:
  ~ScratchBuffers() {
    for (void* p : buffers_) cudaFree(p);
  }
  void* allocate(size_t bytes, const std::string& where) {
    void* p = nullptr;
    KILN_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 256)), where);
    buffers_.push_back(p);
    return p;
  }

 private:
  std::vector<void*> buffers_;
};

// Uniform values in [-1, 1] of the tensor's dtype (not zeros: engines may shortcut on zeros, and
// zeros say nothing about denormal or saturation paths). A 1 MiB random chunk is copied in, then
// doubled in place on the device, so huge activations fill in a few copies.
void fill_random(void* dst, size_t bytes, fe::DataType_t dtype, std::mt19937& rng, const std::string& where) {
  const size_t chunk = std::min<size_t>(bytes, size_t{1} << 20);
  std::vector<unsigned char> host(chunk);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  if (dtype == fe::DataType_t::FLOAT) {
    for (size_t i = 0; i + 4 <= chunk; i += 4) {
      float v = uni(rng);
      std::memcpy(&host[i], &v, 4);
    }
  } else if (dtype == fe::DataType_t::HALF) {
    for (size_t i = 0; i + 2 <= chunk; i += 2) {
      __half v = __float2half(uni(rng));
      std::memcpy(&host[i], &v, 2);
    }
  } else if (dtype == fe::DataType_t::BFLOAT16) {
    for (size_t i = 0; i + 2 <= chunk; i += 2) {
      __nv_bfloat16 v = __float2bfloat16(uni(rng));
      std::memcpy(&host[i], &v, 2);
    }
  } else {
    for (auto& b : host) b = static_cast<unsigned char>(rng() & 0x7f);
  }
  auto* d = static_cast<unsigned char*>(dst);
  KILN_CUDA(cudaMemcpy(d, host.data(), chunk, cudaMemcpyHostToDevice), where);
  for (size_t filled = chunk; filled < bytes;) {
    const size_t n = std::min(filled, bytes - filled);
    KILN_CUDA(cudaMemcpy(d + filled, d, n, cudaMemcpyDeviceToDevice), where);
    filled += n;
  }
}

// ---- plan choice ---------------------------------------------------------------------------------

struct Built {
  int64_t index;
  int64_t workspace;
};

// Builds the plans that may be used, in heuristic order; stops at the first when `first_only`.
std::vector<Built> build_plans(NotedGraph& g, DType io, const CudnnGraphsOptions& o, bool allow_nondeterministic,
                               bool first_only, std::string& failures, int& skipped_tf32, int& skipped_nondet) {
  std::vector<Built> built;
  const int64_t count = g.get_execution_plan_count();
  for (int64_t i = 0; i < count; ++i) {
    if (io == DType::F32 && !o.allow_tf32 &&
        (g.has_note(i, fe::NumericalNote_t::TENSOR_CORE) || g.has_note(i, fe::NumericalNote_t::DOWN_CONVERT_INPUTS))) {
      ++skipped_tf32;
      continue;
    }
    if (!allow_nondeterministic && g.has_note(i, fe::NumericalNote_t::NONDETERMINISTIC)) {
      ++skipped_nondet;
      continue;
    }
    try {
      auto status = g.build_plan_at_index(i);
      if (status.is_bad()) {
        if (failures.size() < 2000) failures += fmt::format("\n  plan {}: {}", i, frontend_message(status));
        continue;
      }
      int64_t ws = 0;
      status = g.get_workspace_size_plan_at_index(i, ws);
      if (status.is_bad() || ws > o.max_workspace_bytes) continue;
      built.push_back({i, ws});
      if (first_only || (o.max_plans_tuned > 0 && built.size() >= static_cast<size_t>(o.max_plans_tuned))) break;
    } catch (const std::exception& e) {
      if (failures.size() < 2000) failures += fmt::format("\n  plan {}: {}", i, e.what());
    }
  }
  return built;
}

// Median time of `runs` executions after one warm-up; negative when the plan fails to execute.
double time_plan(NotedGraph& g, cudnnHandle_t handle, int64_t index, std::vector<void*>& ptrs, void* workspace,
                 cudaStream_t stream, int runs, const std::string& where) {
  auto execute = [&] {
    return g.execute_plan_at_index(handle, ptrs.data(), static_cast<int>(ptrs.size()), workspace, index).is_good();
  };
  if (!execute()) return -1;
  std::vector<cudaEvent_t> events(2 * runs);
  for (auto& e : events) KILN_CUDA(cudaEventCreate(&e), where);
  bool ok = true;
  for (int i = 0; i < runs && ok; ++i) {
    KILN_CUDA(cudaEventRecord(events[2 * i], stream), where);
    ok = execute();
    KILN_CUDA(cudaEventRecord(events[2 * i + 1], stream), where);
  }
  KILN_CUDA(cudaStreamSynchronize(stream), where);  // a kernel fault surfaces here and is fatal
  std::vector<double> ms;
  for (int i = 0; i < runs && ok; ++i) {
    float t = 0;
    KILN_CUDA(cudaEventElapsedTime(&t, events[2 * i], events[2 * i + 1]), where);
    ms.push_back(t);
  }
  for (auto& e : events) cudaEventDestroy(e);
  if (!ok) return -1;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Whether a frontend call succeeded; if not, `c.why_not` says which call and why.
bool frontend_step(const fe::error_t& status, const char* what, PlanChoice& c) {
  if (status.is_bad()) c.why_not = fmt::format("{} failed: {}", what, frontend_message(status));
  return status.is_good();
}

// validate → operation graph → heuristics (A + FALLBACK) → check_support → build → time → keep best.
PlanChoice choose_plan(NotedGraph& g, cudnnHandle_t handle, cudaStream_t stream, DType io,
                       const CudnnGraphsOptions& o, std::vector<int64_t>& uids_out) {
  PlanChoice c;
  const std::string where = "cuDNN plan choice";
  auto step = [&](fe::error_t status, const char* what) { return frontend_step(status, what, c); };
  try {
    if (!step(g.validate(), "validate") || !step(g.build_operation_graph(handle), "build_operation_graph") ||
        !step(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans"))
      return c;
    c.plans_offered = static_cast<int>(g.get_execution_plan_count());
    if (!step(g.check_support(), "check_support")) return c;

    std::string failures;
    int skipped_tf32 = 0, skipped_nondet = 0;
    auto built = build_plans(g, io, o, !o.prefer_deterministic, !o.tune, failures, skipped_tf32, skipped_nondet);
    if (built.empty() && o.prefer_deterministic && skipped_nondet > 0) {
      skipped_tf32 = 0;
      built = build_plans(g, io, o, true, !o.tune, failures, skipped_tf32, skipped_nondet);
      c.deterministic = false;
    }
    c.plans_built = static_cast<int>(built.size());
    if (built.empty()) {
      c.why_not = fmt::format("no usable plan: {} offered, {} skipped as TF32, {} skipped as nondeterministic{}",
                              c.plans_offered, skipped_tf32, skipped_nondet, failures);
      return c;
    }
    if (!step(g.prepare_variant_pack_template(), "prepare_variant_pack_template")) return c;
    uids_out = g.get_variant_pack_uids_sorted();

    Built best = built.front();
    if (o.tune) {
      ScratchBuffers scratch;
      std::mt19937 rng(20261130);
      std::vector<void*> ptrs;
      for (int64_t uid : uids_out) {
        fe::graph::Tensor_attributes t;
        if (!step(g.query_tensor_attributes_of_uid(uid, t), "query_tensor_attributes_of_uid")) return c;
        int64_t elements = 1;
        for (size_t d = 0; d < t.get_dim().size(); ++d) elements += (t.get_dim()[d] - 1) * t.get_stride()[d];
        const size_t bytes = static_cast<size_t>(elements) * fe_dtype_bytes(t.get_data_type());
        ptrs.push_back(scratch.allocate(bytes, where));
        fill_random(ptrs.back(), bytes, t.get_data_type(), rng, where);
      }
      int64_t max_ws = 0;
      for (const auto& b : built) max_ws = std::max(max_ws, b.workspace);
      void* workspace = max_ws > 0 ? scratch.allocate(static_cast<size_t>(max_ws), where) : nullptr;
      KILN_CUDA(cudnnSetStream(handle, stream), where);
      double best_ms = -1;
      for (size_t i = 0; i < built.size(); ++i) {
        const double ms = time_plan(g, handle, built[i].index, ptrs, workspace, stream, o.timed_runs, where);
        if (ms < 0) continue;
        ++c.plans_tried;
        if (i == 0) c.first_plan_ms = ms;
        if (best_ms < 0 || ms < best_ms) best_ms = ms, best = built[i];
      }
      if (best_ms < 0) {
        c.why_not = fmt::format("none of the {} built plans executed", built.size());
        return c;
      }
      c.best_plan_ms = best_ms;
    }
    c.plan_index = best.index;
    c.workspace = static_cast<size_t>(best.workspace);
    std::string name;
    if (g.get_plan_name_at_index(best.index, name).is_good()) c.plan_name = name;
    g.release_plans_except(best.index);
    c.supported = true;
  } catch (const std::exception& e) {
    c.supported = false;
    c.why_not = e.what();
  }
  return c;
}

// Rebuilds the one plan a plan cache entry names on a graph whose tensors and nodes are defined:
// the heuristics list the same engine configurations as when the entry was tuned, and only the
// one with the cached name is built, untimed. The name, not cudnn-frontend's (engine id, knobs)
// replay, identifies it: engines still use knob types the frontend cannot map back (cuDNN 9.19's
// deprecated LDGA and LDGC, for one), so their choices would not rebuild. Unsupported (why_not
// set) when this cuDNN no longer offers or builds it, e.g. after an upgrade the key did not see.
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
  return fmt::format("{} sm{}{} {}SMs cudnn{} frontend{}", prop.name, prop.major, prop.minor,
                     prop.multiProcessorCount, cudnnGetVersion(), CUDNN_FRONTEND_VERSION);
}


int current_device(const std::string& where) {
  int device = 0;
  KILN_CUDA(cudaGetDevice(&device), where);
  return device;
}

}  // namespace

// ---- public API --------------------------------------------------------------------------------

ConvProblem make_conv_problem(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t r, int64_t s,
                              int64_t stride, int64_t pad, DType io) {
  ConvProblem p{n, h, w, c, k, r, s, stride, pad, 0, 0, io};
  if (stride > 0) {
    p.ho = (h + 2 * pad - r) / stride + 1;
    p.wo = (w + 2 * pad - s) / stride + 1;
  }
  return p;
}

std::string conv_problem_str(const ConvProblem& p) {
  return fmt::format("N={} {}x{} C={} -> K={} {}x{} stride {} pad {} out {}x{} {}", p.n, p.h, p.w, p.c, p.k, p.r,
                     p.s, p.stride, p.pad, p.ho, p.wo, dtype_name(p.io));
}

const char* graph_kind_name(GraphKind kind) {
  switch (kind) {
    case GraphKind::CONV_FPROP: return "CONV_FPROP";
    case GraphKind::CONV_FPROP_GENSTATS: return "CONV_FPROP_GENSTATS";
    case GraphKind::CONV_DGRAD: return "CONV_DGRAD";
    case GraphKind::CONV_WGRAD: return "CONV_WGRAD";
    case GraphKind::CONV_SCALE_SHIFT_RELU: return "CONV_SCALE_SHIFT_RELU";
  }
  return "UNKNOWN_GRAPH_KIND";
}

CudnnGraphs::CudnnGraphs(CudnnGraphsOptions options) : options_(options) {
  if (env_text("KILN_CUDNN_TUNE") == "0") options_.tune = false;
  // KILN_CUDNN_TUNE_PLANS=N: time only the first N plans that build (building dominates tuning).
  options_.max_plans_tuned = env_int("KILN_CUDNN_TUNE_PLANS", 0, 9999, options_.max_plans_tuned,
                                     "how many plans to time (0: every plan)");
  options_.timed_runs = std::max(1, options_.timed_runs);
  device_ = current_device("CudnnGraphs");
  KILN_CUDA(cudnnCreate(&handle_), "CudnnGraphs");
  if (const auto path = env_text("KILN_PLAN_CACHE")) options_.plan_cache = *path;
  if (!options_.plan_cache.empty()) {
    plan_cache_ = std::make_unique<PlanCache>(options_.plan_cache);
    device_tag_ = device_tag(device_);
  }
}

CudnnGraphs::~CudnnGraphs() {
  cache_.clear();  // plans before the handle they were built with
  if (tune_stream_) cudaStreamDestroy(tune_stream_);
  if (handle_) cudnnDestroy(handle_);
}

std::string CudnnGraphs::plan_cache_key(GraphKind kind, const ConvProblem& p) const {
  // Everything that decides which plans may be chosen: the GPU and libraries, the graph, and the
  // options that filter plans.
  return fmt::format("{} | {} {} | tf32={} deterministic={} workspace<={}", device_tag_, graph_kind_name(kind),
                     conv_problem_str(p), options_.allow_tf32, options_.prefer_deterministic,
                     options_.max_workspace_bytes);
}

CudnnGraphs::Entry& CudnnGraphs::get_or_build(GraphKind kind, const ConvProblem& p) {
  validate_problem(kind, p);
  const std::string where = fmt::format("cuDNN graph {} for {}", graph_kind_name(kind), conv_problem_str(p));
  const int device = current_device(where);
  if (device != device_)
    fail("{}: the cuDNN handle belongs to device {} but device {} is current; use one CudnnGraphs per device",
         where, device_, device);
  Key key{int64_t(kind), p.n, p.h, p.w, p.c, p.k, p.r, p.s, p.stride, p.pad, p.ho, p.wo, int64_t(p.io), device};
  auto it = cache_.find(key);
  if (it != cache_.end()) return *it->second;

  ++builds_;
  auto entry = std::make_unique<Entry>();
  // A fresh graph with its tensors and nodes (a failed plan replay leaves its plan in the old one).
  auto define = [&] {
    entry->graph = std::make_unique<NotedGraph>();
    entry->graph->set_io_data_type(fe_dtype(p.io))
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    try {
      define_conv_graph(kind, p, *entry->graph);
    } catch (const std::exception& e) {
      entry->error = fmt::format("defining the graph failed: {}", e.what());
    }
  };
  define();
  if (entry->error.empty()) {
    const std::string cache_key = plan_cache_ ? plan_cache_key(kind, p) : std::string();
    if (const auto cached = plan_cache_ ? plan_cache_->find(cache_key) : std::nullopt) {
      entry->choice = replay_plan(*entry->graph, handle_, options_, *cached, entry->uids);
      if (!entry->choice.supported) {
        std::fprintf(stderr, "kiln: %s: the cached plan %s no longer builds (%s); tuning again\n", where.c_str(),
                     cached->name.c_str(), entry->choice.why_not.c_str());
        plan_cache_->forget(cache_key);
        define();
      }
    }
    if (entry->error.empty() && !entry->choice.supported) {
      if (options_.tune && !tune_stream_)
        KILN_CUDA(cudaStreamCreateWithFlags(&tune_stream_, cudaStreamNonBlocking), where);
      entry->choice = choose_plan(*entry->graph, handle_, tune_stream_, p.io, options_, entry->uids);
      const PlanChoice& c = entry->choice;
      if (c.supported && plan_cache_ && c.plans_tried > 0 && !c.plan_name.empty())
        plan_cache_->store(cache_key, CachedPlan{c.plan_name, c.best_plan_ms, c.workspace});
    }
    if (entry->error.empty() && !entry->choice.supported) entry->error = entry->choice.why_not;
  }
  if (!entry->error.empty()) {
    entry->graph.reset();
  } else {
    const PlanChoice& c = entry->choice;
    records_.push_back(TuneRecord{graph_kind_name(kind), p, c.plans_tried, c.first_plan_ms, c.best_plan_ms,
                                  c.workspace, c.plans_offered, c.plan_name, c.deterministic, c.from_cache});
  }
  return *cache_.emplace(std::move(key), std::move(entry)).first->second;
}

size_t CudnnGraphs::prepare(GraphKind kind, const ConvProblem& problem) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = get_or_build(kind, problem);
  if (!e.graph)
    fail("cuDNN graph {} is not supported for {} (check supported() and fall back to CONV_FPROP plus separate "
         "kernels): {}",
         graph_kind_name(kind), conv_problem_str(problem), e.error);
  return e.choice.workspace;
}

bool CudnnGraphs::supported(GraphKind kind, const ConvProblem& problem) {
  try {
    prepare(kind, problem);
    return true;
  } catch (const Error&) {
    return false;
  }
}

void CudnnGraphs::run(GraphKind kind, const ConvProblem& p, const Pointers& ptr, void* workspace,
                      cudaStream_t stream, const std::string& where) {
  std::lock_guard<std::mutex> lock(mutex_);
  const char* kind_name = graph_kind_name(kind);
  Key key{int64_t(kind), p.n, p.h, p.w, p.c, p.k, p.r, p.s, p.stride, p.pad, p.ho, p.wo, int64_t(p.io), device_};
  auto it = cache_.find(key);
  if (it == cache_.end() || !it->second->graph)
    fail("{}: cuDNN graph {} for {} was not prepared{}; call prepare() first (never under CUDA Graph capture)",
         where, kind_name, conv_problem_str(p), it == cache_.end() ? "" : " (it is not supported)");
  Entry& e = *it->second;
  if (e.choice.workspace > 0 && workspace == nullptr)
    fail("{}: cuDNN graph {} needs a {}-byte workspace but got none", where, kind_name, e.choice.workspace);

  std::array<void*, 16> ptrs{};  // no allocation per run; a graph has at most 10 user tensors
  if (e.uids.size() > ptrs.size()) fail("{}: cuDNN graph {} has too many tensors", where, kind_name);
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
      default: fail("{}: cuDNN graph {} has an unexpected tensor uid {}", where, kind_name, uid);
    }
    if (v == nullptr) fail("{}: cuDNN graph {} needs pointer '{}' but it is null", where, kind_name, name);
    ptrs[count++] = const_cast<void*>(v);
  }
  KILN_CUDA(cudnnSetStream(handle_, stream), where);
  fe::error_t status;
  try {
    status = e.graph->execute_plan_at_index(handle_, ptrs.data(), static_cast<int>(count), workspace,
                                            e.choice.plan_index);
  } catch (const std::exception& ex) {
    fail("{}: cuDNN graph {} for {} failed to execute: {}", where, kind_name, conv_problem_str(p), ex.what());
  }
  if (status.is_bad())
    fail("{}: cuDNN graph {} for {} failed to execute: {}", where, kind_name, conv_problem_str(p),
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
