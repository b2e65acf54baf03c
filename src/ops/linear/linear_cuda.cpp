// The linear layer's GEMMs through cuBLASLt (linear_cuda.h).
//
// Row-major tensors on a column-major library. A buffer holding a row-major (r, c) matrix is,
// read column-major with leading dimension c, its transpose (c, r). So cuBLASLt sees
//   x (n, in)        as X = x^T  (in  x n,   ld in)
//   w (out, in)      as W = w^T  (in  x out, ld in)
//   y, dy (n, out)   as Y = y^T  (out x n,   ld out)
// and every GEMM is written for the transpose of its row-major result, D = op(A) op(B) with D
// (m x n, ld m) column-major, which is the row-major result itself:
//   forward  y  = x w^T   <=>  y^T  = w x^T    A = W  op T,  B = X  op N   m = out, n = n,   k = in
//   dgrad    dx = dy w    <=>  dx^T = w^T dy^T A = W  op N,  B = Y  op N   m = in,  n = n,   k = out
//   wgrad    dw = dy^T x  <=>  dw^T = x^T dy   A = X  op N,  B = Y  op T   m = in,  n = out, k = n
// Epilogues: the forward's bias indexes the rows of D = y^T (out of them), which is what
// CUBLASLT_EPILOGUE_BIAS adds (a vector of m elements broadcast over the columns). The bias
// gradient sums dy over the batch, the wgrad's k, into one value per column of D = dw^T (out of
// them): CUBLASLT_EPILOGUE_BGRADB, the reduction of op(B) = dy over k. (BGRADA would reduce
// op(A) = x^T, a different sum.)
//
// Where cuBLASLt offers no algorithm with the epilogue for a problem (dtype, odd sizes), the GEMM
// runs without it: the forward broadcasts the bias into y and accumulates onto it (beta = 1, one
// rounding, as the CPU does), the wgrad is followed by a column-sum kernel (linear_bias_cuda.cu).
//
// Bias dtype. cuBLASLt documents the bias (and bias gradient) vector as having D's type, except
// for int8 (IMMA) and fp8 kernels (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), so with an
// fp16/bf16 D the bias is fp16/bf16: the layer keeps fp32 masters and hands over fp16/bf16 copies
// of both weight and bias (src/ops/linear/linear_layer.cpp). BIAS_DATA_TYPE is left at its default.
//
// Accuracy: CUBLAS_COMPUTE_32F for every dtype (fp32 accumulation; never TF32 for fp32 data), and
// only algorithms whose split-K partial sums stay fp32 (reduction scheme none or compute type):
// the in-place and output-type schemes would round partial sums of an fp16/bf16 GEMM to 16 bits.
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/error.h"
#include "ops/linear/linear_cuda.h"

namespace kiln::cuda {
namespace {

enum class Role { Forward, Dgrad, Wgrad };
enum class Epilogue { None, Bias, BiasGrad };

const char* role_name(Role r) { return r == Role::Forward ? "forward" : r == Role::Dgrad ? "dgrad" : "wgrad"; }
const char* epilogue_name(Epilogue e) {
  return e == Epilogue::Bias ? "BIAS" : e == Epilogue::BiasGrad ? "BGRADB" : "none";
}

// One GEMM of the mapping above. `alignment`: the largest power of two (at most 256 bytes) that
// every pointer the GEMM touches is a multiple of; the algorithms cuBLASLt may pick depend on it,
// as on `limits` (CudaOptions::linear_workspace_mib and linear_candidates: the most workspace one
// GEMM may ask for, of which the backend allocates the largest any op requests, and how many
// heuristic candidates are looked at for one whose partial sums stay fp32).
struct Gemm {
  int device;
  Role role;
  LinearShape s;
  DType dtype;
  Epilogue epilogue;
  int alignment;
  LinearLimits limits;

  bool trans_a() const { return role == Role::Forward; }
  bool trans_b() const { return role == Role::Wgrad; }
  int64_t m() const { return role == Role::Forward ? s.out : s.in; }
  int64_t n() const { return role == Role::Wgrad ? s.out : s.n; }
  int64_t k() const { return role == Role::Forward ? s.in : role == Role::Dgrad ? s.out : s.n; }
  // The stored (column-major, packed) shapes of A and B: op(A) is m x k, op(B) is k x n.
  int64_t a_rows() const { return trans_a() ? k() : m(); }
  int64_t a_cols() const { return trans_a() ? m() : k(); }
  int64_t b_rows() const { return trans_b() ? n() : k(); }
  int64_t b_cols() const { return trans_b() ? k() : n(); }

  using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int, int, int, uint64_t, int>;
  Key key() const {
    return {device,    int(role), s.n, s.in, s.out, int(dtype), int(epilogue),
            alignment, limits.max_workspace_bytes, limits.candidates};
  }
};

// "the wgrad GEMM of x [64, 1600], w [128, 1600] in f16 (m=1600 n=128 k=64, op(A)=N op(B)=T,
// epilogue BGRADB, pointers 256-byte aligned, device 0)": what errors and the plan list say.
std::string describe(const Gemm& g) {
  return fmt::format("the {} GEMM of x [{}, {}], w [{}, {}] in {} (m={} n={} k={}, op(A)={} op(B)={}, epilogue {}, "
                     "pointers {}-byte aligned, device {})",
                     role_name(g.role), g.s.n, g.s.in, g.s.out, g.s.in, dtype_name(g.dtype), g.m(), g.n(), g.k(),
                     g.trans_a() ? "T" : "N", g.trans_b() ? "T" : "N", epilogue_name(g.epilogue), g.alignment,
                     g.device);
}

void check(cublasStatus_t status, const char* call, const Gemm& g, const std::string& where) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("{}: cuBLASLt call {} failed for {}: {} ({})", where, call, describe(g), cublasLtGetStatusName(status),
         cublasLtGetStatusString(status));
}

cudaDataType_t cuda_type(DType dtype, const std::string& where) {
  switch (dtype) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: fail("{}: dtype {} is not supported by the GPU linear layer (use fp32, fp16 or bf16)", where, dtype_name(dtype));
  }
}

int alignment_of(std::initializer_list<const void*> pointers) {
  int alignment = 256;
  for (const void* p : pointers)
    while (p && reinterpret_cast<uintptr_t>(p) % uintptr_t(alignment) != 0) alignment /= 2;
  return alignment;
}

// The cuBLASLt handle of a device, made on first use and kept for the life of the process (one
// per device, shared by every executable and thread: cuBLASLt calls on one handle are
// thread-safe). Made while the device is current (the backend activates it before ops run).
cublasLtHandle_t lt_handle(const Gemm& g, const std::string& where) {
  static std::mutex mutex;
  static std::map<int, cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  cublasLtHandle_t& handle = handles[g.device];
  if (!handle) {
    cublasLtHandle_t made = nullptr;
    check(cublasLtCreate(&made), "cublasLtCreate", g, where);
    handle = made;
  }
  return handle;
}

// The matmul and layout descriptors of a GEMM, in stack storage (no allocation per call).
// `bias`: the bias (forward) or bias gradient (wgrad) pointer of the epilogue, if it has one.
class Descriptors {
 public:
  Descriptors(const Gemm& g, const void* bias, const std::string& where) {
    const cudaDataType_t type = cuda_type(g.dtype, where);
    check(cublasLtMatmulDescInit(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescInit", g, where);
    const int32_t trans_a = g.trans_a() ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b = g.trans_b() ? CUBLAS_OP_T : CUBLAS_OP_N;
    set(g, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a), where);
    set(g, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b), where);
    if (g.epilogue != Epilogue::None) {
      const uint32_t epilogue = g.epilogue == Epilogue::Bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
      set(g, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue), where);
      set(g, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias), where);
    }
    check(cublasLtMatrixLayoutInit(&a_, type, uint64_t(g.a_rows()), uint64_t(g.a_cols()), g.a_rows()),
          "cublasLtMatrixLayoutInit (A)", g, where);
    check(cublasLtMatrixLayoutInit(&b_, type, uint64_t(g.b_rows()), uint64_t(g.b_cols()), g.b_rows()),
          "cublasLtMatrixLayoutInit (B)", g, where);
    check(cublasLtMatrixLayoutInit(&d_, type, uint64_t(g.m()), uint64_t(g.n()), g.m()), "cublasLtMatrixLayoutInit (D)",
          g, where);
  }
  cublasLtMatmulDesc_t op() { return &op_; }
  cublasLtMatrixLayout_t a() { return &a_; }
  cublasLtMatrixLayout_t b() { return &b_; }
  cublasLtMatrixLayout_t d() { return &d_; }  // C (read only with beta = 1) has D's layout and memory

 private:
  void set(const Gemm& g, cublasLtMatmulDescAttributes_t attr, const void* value, size_t bytes, const std::string& where) {
    check(cublasLtMatmulDescSetAttribute(&op_, attr, value, bytes), "cublasLtMatmulDescSetAttribute", g, where);
  }
  cublasLtMatmulDescOpaque_t op_{};
  cublasLtMatrixLayoutOpaque_t a_{}, b_{}, d_{};
};

// What prepare chose for a GEMM. `offered` is false when cuBLASLt had no algorithm for it (or
// none with fp32 partial sums); callers then run it without its epilogue.
struct Plan {
  bool offered = false;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  int32_t splits = 1;
  int candidates = 0, rejected = 0;  // heuristic results, and those dropped for 16-bit partial sums
  cublasStatus_t heuristic = CUBLAS_STATUS_SUCCESS;
};

bool partials_stay_fp32(uint32_t reduction, DType dtype) {
  return dtype == DType::F32 || reduction == CUBLASLT_REDUCTION_SCHEME_NONE ||
         reduction == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
}

// Asks cuBLASLt's heuristic (host only) for the best algorithm of `g` under our alignment and
// workspace limits, and takes the first whose partial sums stay fp32.
Plan choose_plan(const Gemm& g, const void* bias, const std::string& where) {
  Descriptors desc(g, bias, where);
  cublasLtMatmulPreferenceOpaque_t pref{};
  check(cublasLtMatmulPreferenceInit(&pref), "cublasLtMatmulPreferenceInit", g, where);
  const uint64_t max_workspace = g.limits.max_workspace_bytes;
  check(cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                             sizeof(max_workspace)),
        "cublasLtMatmulPreferenceSetAttribute", g, where);
  const uint32_t alignment = uint32_t(g.alignment);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    check(cublasLtMatmulPreferenceSetAttribute(&pref, attr, &alignment, sizeof(alignment)),
          "cublasLtMatmulPreferenceSetAttribute", g, where);

  std::vector<cublasLtMatmulHeuristicResult_t> results(size_t(std::max(1, g.limits.candidates)));
  int count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(lt_handle(g, where), desc.op(), desc.a(), desc.b(), desc.d(), desc.d(), &pref,
                                     int(results.size()), results.data(), &count);
  Plan plan;
  plan.heuristic = status;
  // An epilogue cuBLASLt cannot do for this problem is a refusal (not supported, or invalid for
  // the combination), and the GEMM runs without it; for a plain GEMM it is an error.
  if (status != CUBLAS_STATUS_SUCCESS && (g.epilogue != Epilogue::None || status == CUBLAS_STATUS_NOT_SUPPORTED))
    return plan;
  check(status, "cublasLtMatmulAlgoGetHeuristic", g, where);
  for (int i = 0; i < count; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    ++plan.candidates;
    uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    int32_t splits = 1;
    size_t written = 0;
    check(cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction,
                                               sizeof(reduction), &written),
          "cublasLtMatmulAlgoConfigGetAttribute", g, where);
    check(cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                               sizeof(splits), &written),
          "cublasLtMatmulAlgoConfigGetAttribute", g, where);
    if (splits > 1 && !partials_stay_fp32(reduction, g.dtype)) {
      ++plan.rejected;
      continue;
    }
    if (plan.offered) continue;  // keep counting what the heuristic offered, for the plan list
    plan.offered = true;
    plan.algo = results[i].algo;
    plan.workspace = results[i].workspaceSize;
    plan.reduction = reduction;
    plan.splits = splits;
  }
  return plan;
}

// The process-wide choice of every GEMM seen, keyed by device, problem, epilogue and alignment.
struct PlanCache {
  std::mutex mutex;
  std::map<Gemm::Key, std::pair<Gemm, Plan>> plans;
};
PlanCache& plan_cache() {
  static PlanCache cache;
  return cache;
}

enum class Mode { Prepare, Run };

// The plan of `g`: chosen (and cached) when preparing; when running it must have been prepared,
// since running may not allocate workspace. A GEMM without an epilogue must be offered.
Plan plan_of(const Gemm& g, const void* bias, Mode mode, const std::string& where) {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.plans.find(g.key());
  if (it == cache.plans.end()) {
    if (mode == Mode::Run)
      fail("{}: internal: no cuBLASLt algorithm was chosen for {}; the op ran without being prepared", where,
           describe(g));
    it = cache.plans.emplace(g.key(), std::make_pair(g, choose_plan(g, bias, where))).first;
  }
  const Plan& plan = it->second.second;
  if (!plan.offered && g.epilogue == Epilogue::None)
    fail("{}: cuBLASLt offers no algorithm for {} (heuristic: {}; {} candidates, {} of them dropped for split-K "
         "partial sums rounded to {}) within {} MiB of workspace among its first {} candidates; more may find one: "
         "--linear-workspace-mib / KILN_LINEAR_WORKSPACE_MIB, --linear-candidates / KILN_LINEAR_CANDIDATES",
         where, describe(g), cublasLtGetStatusName(plan.heuristic), plan.candidates, plan.rejected,
         dtype_name(g.dtype), g.limits.max_workspace_bytes >> 20, g.limits.candidates);
  return plan;
}

// A GEMM to run and its plan: with the epilogue where cuBLASLt offers it, else without.
struct Step {
  Gemm gemm;
  Plan plan;
};

Step step(Gemm g, const void* bias, Mode mode, const std::string& where) {
  if (g.epilogue != Epilogue::None) {
    const Plan fused = plan_of(g, bias, mode, where);
    if (fused.offered) return {g, fused};
    g.epilogue = Epilogue::None;
  }
  return {g, plan_of(g, nullptr, mode, where)};
}

Step forward_step(int device, const LinearShape& s, DType dtype, const LinearTensors& t, const LinearLimits& limits,
                  Mode mode, const std::string& where) {
  const Gemm g{device, Role::Forward, s, dtype, t.bias ? Epilogue::Bias : Epilogue::None,
               alignment_of({t.x, t.w, t.bias, t.y}), limits};
  return step(g, t.bias, mode, where);
}

Step wgrad_step(int device, const LinearShape& s, DType dtype, const LinearTensors& t, const LinearLimits& limits,
                Mode mode, const std::string& where) {
  const Gemm g{device, Role::Wgrad, s, dtype, t.dbias ? Epilogue::BiasGrad : Epilogue::None,
               alignment_of({t.x, t.dy, t.dw, t.dbias}), limits};
  return step(g, t.dbias, mode, where);
}

Step dgrad_step(int device, const LinearShape& s, DType dtype, const LinearTensors& t, const LinearLimits& limits,
                Mode mode, const std::string& where) {
  const Gemm g{device, Role::Dgrad, s, dtype, Epilogue::None, alignment_of({t.dy, t.w, t.dx}), limits};
  return step(g, nullptr, mode, where);
}

// D = op(A) op(B) (+ the epilogue's bias) + beta * D.
void run(const Step& st, const void* a, const void* b, void* d, const void* bias, float beta, void* workspace,
         cudaStream_t stream, const std::string& where) {
  const Gemm& g = st.gemm;
  if (st.plan.workspace > 0 && !workspace)
    fail("{}: internal: {} needs {} bytes of workspace but the backend has none", where, describe(g),
         st.plan.workspace);
  Descriptors desc(g, bias, where);
  const float alpha = 1.f;
  check(cublasLtMatmul(lt_handle(g, where), desc.op(), &alpha, a, desc.a(), b, desc.b(), &beta, d, desc.d(), d,
                       desc.d(), &st.plan.algo, workspace, st.plan.workspace, stream),
        "cublasLtMatmul", g, where);
}

}  // namespace

size_t linear_forward_prepare(int device, const LinearShape& s, DType dtype, const LinearTensors& t,
                              const LinearLimits& limits, const std::string& where) {
  return forward_step(device, s, dtype, t, limits, Mode::Prepare, where).plan.workspace;
}

void linear_forward(int device, const LinearShape& s, DType dtype, const LinearTensors& t, const LinearLimits& limits,
                    void* workspace, cudaStream_t stream, const std::string& where) {
  const Step st = forward_step(device, s, dtype, t, limits, Mode::Run, where);
  if (st.gemm.epilogue == Epilogue::Bias) {
    run(st, t.w, t.x, t.y, t.bias, 0.f, workspace, stream, where);
  } else if (t.bias) {  // y = bias rows, then y += x w^T: one rounding of the sum
    linear_broadcast_bias(dtype, t.bias, s.n, s.out, t.y, stream, where);
    run(st, t.w, t.x, t.y, nullptr, 1.f, workspace, stream, where);
  } else {
    run(st, t.w, t.x, t.y, nullptr, 0.f, workspace, stream, where);
  }
}

size_t linear_backward_prepare(int device, const LinearShape& s, DType dtype, const LinearTensors& t,
                               const LinearLimits& limits, const std::string& where) {
  size_t bytes = wgrad_step(device, s, dtype, t, limits, Mode::Prepare, where).plan.workspace;
  if (t.dx) bytes = std::max(bytes, dgrad_step(device, s, dtype, t, limits, Mode::Prepare, where).plan.workspace);
  return bytes;  // the GEMMs run one after the other on one stream: they share the workspace
}

void linear_backward(int device, const LinearShape& s, DType dtype, const LinearTensors& t, const LinearLimits& limits,
                     void* workspace, cudaStream_t stream, const std::string& where) {
  const Step wgrad = wgrad_step(device, s, dtype, t, limits, Mode::Run, where);
  run(wgrad, t.x, t.dy, t.dw, wgrad.gemm.epilogue == Epilogue::BiasGrad ? t.dbias : nullptr, 0.f, workspace, stream,
      where);
  if (t.dbias && wgrad.gemm.epilogue != Epilogue::BiasGrad) linear_bias_grad(dtype, t.dy, s.n, s.out, t.dbias, stream, where);
  if (t.dx)
    run(dgrad_step(device, s, dtype, t, limits, Mode::Run, where), t.w, t.dy, t.dx, nullptr, 0.f, workspace, stream,
        where);
}

std::vector<std::string> linear_plans() {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  std::vector<std::string> lines;
  for (const auto& [key, entry] : cache.plans) {
    const auto& [g, plan] = entry;
    const std::string limits =
        fmt::format("limits {} MiB, {} candidates", g.limits.max_workspace_bytes >> 20, g.limits.candidates);
    lines.push_back(plan.offered ? fmt::format("{}: offered, {} split(s), reduction scheme {}, workspace {} bytes "
                                               "({} candidates, {} dropped for 16-bit partial sums; {})",
                                               describe(g), plan.splits, plan.reduction, plan.workspace,
                                               plan.candidates, plan.rejected, limits)
                                 : fmt::format("{}: not offered (heuristic: {}; {} candidates, {} dropped for "
                                               "16-bit partial sums; {})",
                                               describe(g), cublasLtGetStatusName(plan.heuristic), plan.candidates,
                                               plan.rejected, limits));
  }
  return lines;
}

}  // namespace kiln::cuda
