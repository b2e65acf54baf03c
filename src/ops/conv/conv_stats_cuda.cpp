#include "ops/conv/conv_stats_cuda.h"

#include <cstdio>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/conv/conv_cuda.h"
#include "ops/conv/conv_cudnn_graphs_cuda.h"
#include "ops/conv/conv_sums_cutlass.h"
#include "ops/conv/engine_choices.h"
#include "ops/conv/few_channel_conv_cuda.h"
#include "ops/conv/tap_fold_cuda.h"
#include "runtime/cuda/event_timing.h"
#include "runtime/cuda/scratch_buffers.h"

namespace kiln::cuda {
namespace {

enum class Way { kGenstats, kConvThenSums, kSumsGraph, kFewChannel, kCutlass, kFoldByStride, kFoldWidthWhole, kFoldWhole };

// The fold of a folding way: its convolution with more channels and fewer taps (tap_fold_cuda.h)
// runs on whichever way was chosen for that problem.
std::optional<TapFold> fold_of(Way w) {
  switch (w) {
    case Way::kFoldByStride: return TapFold::kByStride;
    case Way::kFoldWidthWhole: return TapFold::kWidthWhole;
    case Way::kFoldWhole: return TapFold::kWhole;
    default: return std::nullopt;
  }
}

Way way_of(TapFold f) {
  return f == TapFold::kByStride ? Way::kFoldByStride : f == TapFold::kWidthWhole ? Way::kFoldWidthWhole : Way::kFoldWhole;
}

const char* way_name(Way w) {
  switch (w) {
    case Way::kGenstats: return "cuDNN conv + genstats graph";
    case Way::kConvThenSums: return "cuDNN conv graph, then the sum kernel";
    case Way::kSumsGraph: return "cuDNN conv + reductions graph";
    case Way::kCutlass: return "CUTLASS conv with sums";
    case Way::kFoldByStride:
    case Way::kFoldWidthWhole:
    case Way::kFoldWhole: return tap_fold_name(*fold_of(w));
    default: return "few-channel kernel";
  }
}

int64_t rows_of(const ConvProblem& p) { return p.n * p.ho * p.wo; }

// One table per CudaOptions::conv_stats, ::cutlass and ::fold_taps mode: backends with different
// modes share a graph cache.
EngineChoices<Way> choices_by_mode[3][2][3];
EngineChoices<Way>& choices(const CudaBackend& be) {
  return choices_by_mode[be.options().conv_stats][be.options().cutlass][be.options().fold_taps];
}

// The cuDNN graph a way runs (kiln's own kernels run none).
const CudnnGraphDef& graph_of(Way way) {
  return way == Way::kGenstats ? kConvFpropGenstatsGraph : way == Way::kSumsGraph ? kConvFpropSumsGraph : kConvFpropGraph;
}

size_t workspace_bytes(CudaBackend& be, const ConvProblem& p, Way w);

// A folding way's workspace: the folded input and filter, then what the folded problem's way needs
// (chosen when prepare_folded prepared it).
size_t fold_workspace_bytes(CudaBackend& be, const ConvProblem& p, TapFold f) {
  const ConvProblem q = conv_problem_of(folded_shape(conv_shape(p), f));
  const Way inner = choices(be).at(be.graphs(), q, "folded convolution", conv_problem_str(p));
  return fold_scratch_bytes(conv_shape(p), f) + workspace_align(workspace_bytes(be, q, inner));
}

size_t workspace_bytes(CudaBackend& be, const ConvProblem& p, Way w) {
  if (const std::optional<TapFold> f = fold_of(w)) return fold_workspace_bytes(be, p, *f);
  if (w == Way::kFewChannel) return few_channel_fprop_workspace_bytes(conv_shape(p));
  if (w == Way::kCutlass) return cutlass_fprop_sums_workspace_bytes(conv_shape(p));
  return be.graphs().prepare(graph_of(w), p);
}

void run_way(CudaBackend& be, const ConvProblem& p, Way way, const void* x, const void* w, void* y, float* sum,
             float* sqsum, void* reduce, size_t reduce_bytes, void* workspace, cudaStream_t stream,
             const std::string& where) {
  if (const std::optional<TapFold> f = fold_of(way)) {
    const ConvShape shape = conv_shape(p);
    const FoldScratch s = fold_scratch(shape, *f, workspace);
    fold_input(shape, *f, x, s.input, stream, where);
    fold_filter(shape, *f, w, s.filter, stream, where);
    return run_conv_stats(be, conv_problem_of(folded_shape(shape, *f)), s.input, s.filter, y, sum, sqsum, reduce,
                          reduce_bytes, s.rest, stream, where);
  }
  if (way == Way::kFewChannel)
    return few_channel_fprop_stats(conv_shape(p), x, w, y, sum, sqsum, workspace, stream, where);
  if (way == Way::kCutlass) return cutlass_fprop_sums(conv_shape(p), x, w, y, sum, sqsum, workspace, stream, where);
  Pointers ptr;
  ptr.x = x, ptr.w = w, ptr.y = y;
  const bool graph_sums = way != Way::kConvThenSums;  // genstats or the reductions graph
  if (graph_sums) ptr.sum = sum, ptr.sq_sum = sqsum;
  be.graphs().run(graph_of(way), p, ptr, workspace, stream, where);
  if (!graph_sums)
    channel_sums(p.io, y, rows_of(p), p.k, sum, sqsum, reduce, reduce_bytes, stream, where);
}

// Median of 5 timed runs of a way after one warm-up, in ms, on scratch of its own.
double time_way(CudaBackend& be, const ConvProblem& p, Way way, const void* x, const void* w, void* y,
                const std::string& where) {
  ScratchBuffers scratch;
  auto* sums = static_cast<float*>(scratch.allocate(2 * size_t(p.k) * sizeof(float), where));
  const size_t reduce_bytes = channel_sums_workspace_bytes(rows_of(p), p.k);
  void* reduce = scratch.allocate(reduce_bytes, where);
  void* workspace = scratch.allocate(workspace_bytes(be, p, way), where);
  cudaStream_t stream = be.stream(0);
  return median_event_ms(
      stream, 5,
      [&] {
        run_way(be, p, way, x, w, y, sums, sums + p.k, reduce, reduce_bytes, workspace, stream, where);
        return true;
      },
      where);
}

// The ways that may serve `p`, the one to keep without timing first, as CudaOptions::conv_stats
// asks: 0 the sum kernel after the convolution; 1 genstats where cuDNN builds it (fp16), else the
// sum kernel; 2 genstats where it builds, else the reductions graph and the sum kernel, timed.
// Besides these, in modes 1 and 2, kiln's CUTLASS convolution with sums where it takes the shape
// (1x1 of stride 1, fp16/bf16 on an sm_90 GPU) unless CudaOptions::cutlass is off, and in every
// mode the few-channel kernel where it takes the shape; and the folds of its taps into
// channels where one applies, as CudaOptions::fold_taps asks (1 the lean ones timed beside the rest,
// 2 every one, alone).
// cuDNN notes neither statistics graph nondeterministic, yet both finish their sums with atomics:
// two runs differ in the last bits (measured on the H200); the sum kernel and kiln's own kernels
// add in a fixed order.
std::vector<Way> candidates(CudaBackend& be, const ConvProblem& p) {
  std::vector<Way> ways, folds;
  for (TapFold f : tap_folds_for_mode(conv_shape(p), be.options().fold_taps)) folds.push_back(way_of(f));
  if (be.options().fold_taps == 2 && !folds.empty()) return folds;
  const int mode = be.options().conv_stats, cutlass = be.options().cutlass;
  const bool cutlass_takes = mode != 0 && cutlass && cutlass_fprop_sums_supported(conv_shape(p));
  if (mode != 0 && be.graphs().supported(kConvFpropGenstatsGraph, p)) {
    ways.push_back(Way::kGenstats);
  } else {
    if (mode == 2 && be.graphs().supported(kConvFpropSumsGraph, p)) ways.push_back(Way::kSumsGraph);
    ways.push_back(Way::kConvThenSums);
  }
  if (cutlass_takes) ways.push_back(Way::kCutlass);
  if (few_channel_conv_supported(conv_shape(p))) ways.push_back(Way::kFewChannel);
  ways.insert(ways.end(), folds.begin(), folds.end());
  return ways;
}

// Prepares the folded problem of a folding way (its own choice of way, timed on x and w folded),
// so that the folding way can be timed and run.
void prepare_folded(CudaBackend& be, const ConvProblem& p, TapFold f, const void* x, const void* w, void* y,
                    const std::string& where) {
  const ConvShape shape = conv_shape(p);
  ScratchBuffers scratch;
  const FoldScratch s = fold_scratch(shape, f, scratch.allocate(fold_scratch_bytes(shape, f), where));
  fold_input(shape, f, x, s.input, be.stream(0), where);
  fold_filter(shape, f, w, s.filter, be.stream(0), where);
  prepare_conv_stats(be, conv_problem_of(folded_shape(shape, f)), s.input, s.filter, y, where);
  KILN_CUDA(cudaStreamSynchronize(be.stream(0)), where);
}

}  // namespace

size_t prepare_conv_stats(CudaBackend& be, const ConvProblem& p, const void* x, const void* w, void* y,
                          const std::string& where) {
  if (const std::optional<Way> way = choices(be).find(be.graphs(), p)) return workspace_bytes(be, p, *way);
  const std::vector<Way> ways = candidates(be, p);
  for (Way way : ways)
    if (const std::optional<TapFold> f = fold_of(way)) prepare_folded(be, p, *f, x, w, y, where);
  Way chosen = ways.front();
  // Without a tuned plan there was no timing at prepare: the first way stays.
  if (ways.size() > 1 && be.graphs().plan_ms(graph_of(ways.front()), p) > 0) {
    std::string report;
    double best_ms = -1;
    for (Way way : ways) {
      const double ms = time_way(be, p, way, x, w, y, where);
      report += fmt::format("{}{} {:.4f} ms", report.empty() ? "" : ", ", way_name(way), ms);
      if (ms >= 0 && (best_ms < 0 || ms < best_ms)) best_ms = ms, chosen = way;
    }
    std::fprintf(stderr, "kiln: conv with statistics %s: %s (%s)\n", conv_problem_str(p).c_str(), way_name(chosen),
                 report.c_str());
  }
  choices(be).set(be.graphs(), p, chosen);
  return workspace_bytes(be, p, chosen);
}

void run_conv_stats(CudaBackend& be, const ConvProblem& p, const void* x, const void* w, void* y, float* sum,
                    float* sqsum, void* reduce, size_t reduce_bytes, void* workspace, cudaStream_t stream,
                    const std::string& where) {
  const Way way = choices(be).at(be.graphs(), p, "convolution", where);
  run_way(be, p, way, x, w, y, sum, sqsum, reduce, reduce_bytes, workspace, stream, where);
}

}  // namespace kiln::cuda
