#include "ops/conv/conv_wgrad_cuda.h"

#include <fmt/format.h>

#include <cstdio>
#include <limits>
#include <optional>
#include <vector>

#include "ops/conv/conv_cuda.h"
#include "ops/conv/conv_cudnn_graphs_cuda.h"
#include "ops/conv/engine_choices.h"
#include "ops/conv/few_channel_conv_cuda.h"
#include "ops/conv/wgrad_direct_cuda.h"
#include "runtime/cuda/event_timing.h"
#include "runtime/cuda/scratch_buffers.h"

namespace kiln::cuda {
namespace {

enum class Engine { kCudnn, kDirect, kFewChannel };

const char* engine_name(Engine e) {
  switch (e) {
    case Engine::kDirect: return "direct kernel";
    case Engine::kFewChannel: return "few-channel kernel";
    default: return "cuDNN plan";
  }
}

EngineChoices<Engine> choices;

size_t workspace_bytes(CudaBackend& be, const ConvProblem& p, Engine e) {
  switch (e) {
    case Engine::kDirect: return wgrad_direct_workspace_bytes(conv_shape(p));
    case Engine::kFewChannel: return few_channel_wgrad_workspace_bytes(conv_shape(p));
    default: return be.graphs().prepare(kConvWgradGraph, p);
  }
}

void run_kernel(const ConvProblem& p, Engine e, const void* x, const void* dy, void* dw, void* workspace,
                cudaStream_t stream, const std::string& where) {
  if (e == Engine::kDirect) return wgrad_direct(conv_shape(p), x, dy, dw, workspace, stream, where);
  few_channel_wgrad(conv_shape(p), x, dy, dw, workspace, stream, where);
}

// Median of 5 timed runs of a kiln kernel after one warm-up, in ms, on scratch of its own.
double time_kernel(CudaBackend& be, const ConvProblem& p, Engine e, const void* x, const void* dy, void* dw,
                   const std::string& where) {
  ScratchBuffers scratch;
  void* workspace = scratch.allocate(workspace_bytes(be, p, e), where);
  cudaStream_t stream = be.stream(0);
  return median_event_ms(
      stream, 5,
      [&] {
        run_kernel(p, e, x, dy, dw, workspace, stream, where);
        return true;
      },
      where);
}

}  // namespace

size_t prepare_wgrad(CudaBackend& be, const ConvProblem& p, const void* x, const void* dy, void* dw,
                     const std::string& where) {
  if (const std::optional<Engine> e = choices.find(be.graphs(), p)) return workspace_bytes(be, p, *e);
  std::vector<Engine> kernels;
  if (wgrad_direct_supported(conv_shape(p))) kernels.push_back(Engine::kDirect);
  if (few_channel_conv_supported(conv_shape(p))) kernels.push_back(Engine::kFewChannel);
  const bool cudnn_fits = kernels.empty() || be.graphs().supported(kConvWgradGraph, p);
  Engine chosen = cudnn_fits ? Engine::kCudnn : kernels.front();
  if (!kernels.empty()) {
    const double cudnn_ms = cudnn_fits ? be.graphs().plan_ms(kConvWgradGraph, p) : 0;
    double best_ms = cudnn_fits ? cudnn_ms : std::numeric_limits<double>::infinity();
    std::string times;
    // Without a tuned plan time there is nothing to compare with: cuDNN's plan stays.
    if (!cudnn_fits || cudnn_ms > 0) {
      for (Engine e : kernels) {
        const double ms = time_kernel(be, p, e, x, dy, dw, where);
        times += fmt::format("{} {:.4f} ms, ", engine_name(e), ms);
        if (ms >= 0 && ms < best_ms) chosen = e, best_ms = ms;
      }
    }
    std::fprintf(stderr, "kiln: wgrad %s: %s (%scuDNN plan %.4f ms%s)\n", conv_problem_str(p).c_str(),
                 engine_name(chosen), times.c_str(), cudnn_ms, cudnn_fits ? "" : ": no plan");
  }
  choices.set(be.graphs(), p, chosen);
  return workspace_bytes(be, p, chosen);
}

void run_wgrad(CudaBackend& be, const ConvProblem& p, const void* x, const void* dy, void* dw, void* workspace,
               cudaStream_t stream, const std::string& where) {
  const Engine e = choices.at(be.graphs(), p, "weight gradient", where);
  if (e != Engine::kCudnn) return run_kernel(p, e, x, dy, dw, workspace, stream, where);
  Pointers ptr;
  ptr.x = x, ptr.dy = dy, ptr.dw = dw;
  be.graphs().run(kConvWgradGraph, p, ptr, workspace, stream, where);
}

}  // namespace kiln::cuda
