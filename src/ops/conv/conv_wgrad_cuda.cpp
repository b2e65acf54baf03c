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
#include "ops/conv/tap_fold_cuda.h"
#include "ops/conv/wgrad_direct_cuda.h"
#include "runtime/cuda/event_timing.h"
#include "runtime/cuda/scratch_buffers.h"

namespace kiln::cuda {
namespace {

enum class Engine { kCudnn, kDirect, kFewChannel, kFoldByStride, kFoldWidthWhole, kFoldWhole };

// The fold of a folding engine: the weight gradient of its folded problem (tap_fold_cuda.h), on the
// engine chosen for that problem, read back into the filter's taps.
std::optional<TapFold> fold_of(Engine e) {
  switch (e) {
    case Engine::kFoldByStride: return TapFold::kByStride;
    case Engine::kFoldWidthWhole: return TapFold::kWidthWhole;
    case Engine::kFoldWhole: return TapFold::kWhole;
    default: return std::nullopt;
  }
}

Engine engine_of(TapFold f) {
  return f == TapFold::kByStride     ? Engine::kFoldByStride
         : f == TapFold::kWidthWhole ? Engine::kFoldWidthWhole
                                     : Engine::kFoldWhole;
}

const char* engine_name(Engine e) {
  if (const std::optional<TapFold> f = fold_of(e)) return tap_fold_name(*f);
  switch (e) {
    case Engine::kDirect: return "direct kernel";
    case Engine::kFewChannel: return "few-channel kernel";
    default: return "cuDNN plan";
  }
}

// One table per CudaOptions::fold_taps mode: backends with different modes share a graph cache.
EngineChoices<Engine> choices_by_mode[3];
EngineChoices<Engine>& choices(const CudaBackend& be) { return choices_by_mode[be.options().fold_taps]; }

ConvProblem folded(const ConvProblem& p, TapFold f) { return conv_problem_of(folded_shape(conv_shape(p), f)); }

size_t workspace_bytes(CudaBackend& be, const ConvProblem& p, Engine e) {
  if (const std::optional<TapFold> f = fold_of(e)) {
    const ConvProblem q = folded(p, *f);
    const Engine inner = choices(be).at(be.graphs(), q, "folded weight gradient", conv_problem_str(p));
    return fold_scratch_bytes(conv_shape(p), *f) + workspace_align(workspace_bytes(be, q, inner));
  }
  switch (e) {
    case Engine::kDirect: return wgrad_direct_workspace_bytes(conv_shape(p));
    case Engine::kFewChannel: return few_channel_wgrad_workspace_bytes(conv_shape(p));
    default: return be.graphs().prepare(kConvWgradGraph, p);
  }
}

void run_kernel(CudaBackend& be, const ConvProblem& p, Engine e, const void* x, const void* dy, void* dw,
                void* workspace, cudaStream_t stream, const std::string& where) {
  if (const std::optional<TapFold> f = fold_of(e)) {
    const ConvShape shape = conv_shape(p);
    const FoldScratch s = fold_scratch(shape, *f, workspace);
    fold_input(shape, *f, x, s.input, stream, where);
    run_wgrad(be, folded(p, *f), s.input, dy, s.filter, s.rest, stream, where);
    return unfold_filter_grad(shape, *f, s.filter, dw, stream, where);
  }
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
        run_kernel(be, p, e, x, dy, dw, workspace, stream, where);
        return true;
      },
      where);
}

// Prepares the folded problem of a folding engine (its own engine, timed on x folded), so that the
// folding engine can be timed and run.
void prepare_folded(CudaBackend& be, const ConvProblem& p, TapFold f, const void* x, const void* dy,
                    const std::string& where) {
  const ConvShape shape = conv_shape(p);
  ScratchBuffers scratch;
  const FoldScratch s = fold_scratch(shape, f, scratch.allocate(fold_scratch_bytes(shape, f), where));
  fold_input(shape, f, x, s.input, be.stream(0), where);
  prepare_wgrad(be, folded(p, f), s.input, dy, s.filter, where);
  KILN_CUDA(cudaStreamSynchronize(be.stream(0)), where);
}

}  // namespace

size_t prepare_wgrad(CudaBackend& be, const ConvProblem& p, const void* x, const void* dy, void* dw,
                     const std::string& where) {
  if (const std::optional<Engine> e = choices(be).find(be.graphs(), p)) return workspace_bytes(be, p, *e);
  // kiln's kernels and the folds of the filter's taps (CudaOptions::fold_taps: 1 the lean ones timed
  // beside the rest, 2 every one, alone), each timed against cuDNN's tuned plan.
  std::vector<Engine> kernels;
  const std::vector<TapFold> folds = tap_folds_for_mode(conv_shape(p), be.options().fold_taps);
  const bool folds_only = be.options().fold_taps == 2 && !folds.empty();
  if (!folds_only && wgrad_direct_supported(conv_shape(p))) kernels.push_back(Engine::kDirect);
  if (!folds_only && few_channel_conv_supported(conv_shape(p))) kernels.push_back(Engine::kFewChannel);
  for (TapFold f : folds) {
    prepare_folded(be, p, f, x, dy, where);
    kernels.push_back(engine_of(f));
  }
  const bool cudnn_fits = !folds_only && (kernels.empty() || be.graphs().supported(kConvWgradGraph, p));
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
                 engine_name(chosen), times.c_str(), cudnn_ms,
                 folds_only ? ": not tried, fold_taps 2" : cudnn_fits ? "" : ": no plan");
  }
  choices(be).set(be.graphs(), p, chosen);
  return workspace_bytes(be, p, chosen);
}

void run_wgrad(CudaBackend& be, const ConvProblem& p, const void* x, const void* dy, void* dw, void* workspace,
               cudaStream_t stream, const std::string& where) {
  const Engine e = choices(be).at(be.graphs(), p, "weight gradient", where);
  if (e != Engine::kCudnn) return run_kernel(be, p, e, x, dy, dw, workspace, stream, where);
  Pointers ptr;
  ptr.x = x, ptr.dy = dy, ptr.dw = dw;
  be.graphs().run(kConvWgradGraph, p, ptr, workspace, stream, where);
}

}  // namespace kiln::cuda
