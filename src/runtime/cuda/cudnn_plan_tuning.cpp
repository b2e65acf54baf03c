// Plan choice by autotuning: building the usable plans, random device buffers to time them on,
// timing, and keeping the fastest.
#include "runtime/cuda/cudnn_plan_tuning.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <random>
#include <string>

#include "kiln/error.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/event_timing.h"
#include "runtime/cuda/scratch_buffers.h"

namespace kiln::cuda::detail {
namespace {

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
  // Device-to-device copies return before they finish, on the legacy stream, which the
  // non-blocking tuning stream does not wait for: finish them before plans are timed on it.
  KILN_CUDA(cudaDeviceSynchronize(), where);
}

// ---- plan choice ---------------------------------------------------------------------------------

struct Built {
  int64_t index;
  int64_t workspace;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Builds the plans that may be used, in heuristic order; stops at the first when `first_only`, after
// o.max_plans_tuned plans, or once o.tune_budget_s has passed since `start` with a plan built.
// `cut_short` says whether one of those bounds, rather than the list's end, stopped it.
std::vector<Built> build_plans(NotedGraph& g, DType io, const CudnnGraphsOptions& o, bool allow_nondeterministic,
                               bool first_only, Clock::time_point start, bool& cut_short, std::string& failures,
                               int& skipped_tf32, int& skipped_nondet) {
  std::vector<Built> built;
  cut_short = false;
  const int64_t count = g.get_execution_plan_count();
  for (int64_t i = 0; i < count; ++i) {
    if (!built.empty() && o.tune_budget_s > 0 && seconds_since(start) > o.tune_budget_s) {
      cut_short = true;
      break;
    }
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
      if (first_only || (o.max_plans_tuned > 0 && built.size() >= static_cast<size_t>(o.max_plans_tuned))) {
        cut_short = i + 1 < count;
        break;
      }
    } catch (const std::exception& e) {
      if (failures.size() < 2000) failures += fmt::format("\n  plan {}: {}", i, e.what());
    }
  }
  return built;
}

// Median time of `runs` executions after one warm-up; negative when the plan fails to execute.
double time_plan(NotedGraph& g, cudnnHandle_t handle, int64_t index, std::vector<void*>& ptrs, void* workspace,
                 cudaStream_t stream, int runs, const std::string& where) {
  return median_event_ms(
      stream, runs,
      [&] {
        return g.execute_plan_at_index(handle, ptrs.data(), static_cast<int>(ptrs.size()), workspace, index).is_good();
      },
      where);
}

}  // namespace

PlanChoice choose_plan(NotedGraph& g, cudnnHandle_t handle, cudaStream_t stream, DType io,
                       const CudnnGraphsOptions& o, std::vector<int64_t>& uids_out) {
  PlanChoice c;
  const Clock::time_point start = Clock::now();
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
    bool cut_short = false;
    auto built = build_plans(g, io, o, !o.prefer_deterministic, !o.tune, start, cut_short, failures, skipped_tf32,
                             skipped_nondet);
    if (built.empty() && o.prefer_deterministic && skipped_nondet > 0) {
      skipped_tf32 = 0;
      built = build_plans(g, io, o, true, !o.tune, start, cut_short, failures, skipped_tf32, skipped_nondet);
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
      c.exhaustive = !cut_short;
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

}  // namespace kiln::cuda::detail
