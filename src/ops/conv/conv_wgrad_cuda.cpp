#include "ops/conv/conv_wgrad_cuda.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "ops/conv/wgrad_direct_cuda.h"
#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {

WgradShape shape_of(const ConvProblem& p) {
  return {p.n, p.h, p.w, p.c, p.k, p.r, p.s, p.stride, p.pad, p.ho, p.wo, p.io};
}

// Chosen engines: true for the direct kernel, by graph cache and shape.
std::mutex choices_mutex;
std::map<std::pair<const CudnnGraphs*, std::string>, bool> choices;

// Median of 5 timed runs of the direct kernel after one warm-up, in ms.
double time_direct(const ConvProblem& p, const void* x, const void* dy, void* dw, cudaStream_t stream,
                   const std::string& where) {
  const WgradShape s = shape_of(p);
  void* scratch = nullptr;
  KILN_CUDA(cudaMalloc(&scratch, wgrad_direct_workspace_bytes(s)), where);
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<float> ms;
  try {
    KILN_CUDA(cudaEventCreate(&start), where);
    KILN_CUDA(cudaEventCreate(&stop), where);
    wgrad_direct(s, x, dy, dw, scratch, stream, where);
    for (int i = 0; i < 5; ++i) {
      KILN_CUDA(cudaEventRecord(start, stream), where);
      wgrad_direct(s, x, dy, dw, scratch, stream, where);
      KILN_CUDA(cudaEventRecord(stop, stream), where);
      KILN_CUDA(cudaEventSynchronize(stop), where);
      float t = 0;
      KILN_CUDA(cudaEventElapsedTime(&t, start, stop), where);
      ms.push_back(t);
    }
  } catch (...) {
    cudaFree(scratch);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    throw;
  }
  cudaFree(scratch);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

size_t prepare_wgrad(CudaBackend& be, const ConvProblem& p, const void* x, const void* dy, void* dw,
                     const std::string& where) {
  const auto key = std::make_pair(&be.graphs(), conv_problem_str(p));
  {
    std::lock_guard<std::mutex> lock(choices_mutex);
    if (auto it = choices.find(key); it != choices.end())
      return it->second ? wgrad_direct_workspace_bytes(shape_of(p)) : be.graphs().prepare(GraphKind::CONV_WGRAD, p);
  }
  const bool direct_fits = wgrad_direct_supported(shape_of(p));
  const bool cudnn_fits = !direct_fits || be.graphs().supported(GraphKind::CONV_WGRAD, p);
  bool direct = false;
  double cudnn_ms = 0, direct_ms = 0;
  if (!cudnn_fits) {
    direct = true;
  } else if (direct_fits) {
    cudnn_ms = be.graphs().plan_ms(GraphKind::CONV_WGRAD, p);
    if (cudnn_ms > 0) {
      direct_ms = time_direct(p, x, dy, dw, be.stream(0), where);
      direct = direct_ms < cudnn_ms;
    }
  }
  if (direct_fits)
    std::fprintf(stderr, "kiln: wgrad %s: %s (direct kernel %.4f ms, cuDNN plan %.4f ms%s)\n",
                 conv_problem_str(p).c_str(), direct ? "direct kernel" : "cuDNN plan", direct_ms, cudnn_ms,
                 cudnn_fits ? "" : ": no plan");
  {
    std::lock_guard<std::mutex> lock(choices_mutex);
    choices[key] = direct;
  }
  return direct ? wgrad_direct_workspace_bytes(shape_of(p)) : be.graphs().prepare(GraphKind::CONV_WGRAD, p);
}

void run_wgrad(CudaBackend& be, const ConvProblem& p, const void* x, const void* dy, void* dw, void* workspace,
               cudaStream_t stream, const std::string& where) {
  bool direct = false;
  {
    std::lock_guard<std::mutex> lock(choices_mutex);
    auto it = choices.find(std::make_pair(&be.graphs(), conv_problem_str(p)));
    if (it == choices.end())
      fail("{}: the weight gradient of {} was not prepared; run the op's prepare first", where, conv_problem_str(p));
    direct = it->second;
  }
  if (direct) return wgrad_direct(shape_of(p), x, dy, dw, workspace, stream, where);
  Pointers ptr;
  ptr.x = x, ptr.dy = dy, ptr.dw = dw;
  be.graphs().run(GraphKind::CONV_WGRAD, p, ptr, workspace, stream, where);
}

}  // namespace kiln::cuda
