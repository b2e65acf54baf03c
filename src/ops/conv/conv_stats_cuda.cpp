#include "ops/conv/conv_stats_cuda.h"

#include <cstdio>
#include <optional>

#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/conv/conv_cuda.h"
#include "ops/conv/conv_cudnn_graphs_cuda.h"
#include "ops/conv/engine_choices.h"
#include "ops/conv/few_channel_conv_cuda.h"
#include "runtime/cuda/event_timing.h"
#include "runtime/cuda/scratch_buffers.h"

namespace kiln::cuda {
namespace {

enum class Way { kGenstats, kConvThenSums, kFewChannel };

const char* way_name(Way w) {
  switch (w) {
    case Way::kGenstats: return "cuDNN conv + genstats graph";
    case Way::kConvThenSums: return "cuDNN conv graph, then the sum kernel";
    default: return "few-channel kernel";
  }
}

int64_t rows_of(const ConvProblem& p) { return p.n * p.ho * p.wo; }

EngineChoices<Way> choices;

size_t workspace_bytes(CudaBackend& be, const ConvProblem& p, Way w) {
  switch (w) {
    case Way::kGenstats: return be.graphs().prepare(kConvFpropGenstatsGraph, p);
    case Way::kConvThenSums: return be.graphs().prepare(kConvFpropGraph, p);
    default: return few_channel_fprop_workspace_bytes(conv_shape(p));
  }
}

void run_way(CudaBackend& be, const ConvProblem& p, Way way, const void* x, const void* w, void* y, float* sum,
             float* sqsum, void* reduce, size_t reduce_bytes, void* workspace, cudaStream_t stream,
             const std::string& where) {
  if (way == Way::kFewChannel)
    return few_channel_fprop_stats(conv_shape(p), x, w, y, sum, sqsum, workspace, stream, where);
  Pointers ptr;
  ptr.x = x, ptr.w = w, ptr.y = y;
  if (way == Way::kGenstats) {
    ptr.sum = sum, ptr.sq_sum = sqsum;
    be.graphs().run(kConvFpropGenstatsGraph, p, ptr, workspace, stream, where);
    return;
  }
  be.graphs().run(kConvFpropGraph, p, ptr, workspace, stream, where);
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

}  // namespace

size_t prepare_conv_stats(CudaBackend& be, const ConvProblem& p, const void* x, const void* w, void* y,
                          const std::string& where) {
  if (const std::optional<Way> way = choices.find(be.graphs(), p)) return workspace_bytes(be, p, *way);
  const Way cudnn =
      be.graphs().supported(kConvFpropGenstatsGraph, p) ? Way::kGenstats : Way::kConvThenSums;
  Way chosen = cudnn;
  if (few_channel_conv_supported(conv_shape(p))) {
    const CudnnGraphDef& graph = cudnn == Way::kGenstats ? kConvFpropGenstatsGraph : kConvFpropGraph;
    // Without a tuned plan there was no timing at prepare: the cuDNN way stays.
    double cudnn_ms = 0, few_ms = 0;
    if (be.graphs().plan_ms(graph, p) > 0) {
      cudnn_ms = time_way(be, p, cudnn, x, w, y, where);
      few_ms = time_way(be, p, Way::kFewChannel, x, w, y, where);
      if (few_ms >= 0 && (cudnn_ms < 0 || few_ms < cudnn_ms)) chosen = Way::kFewChannel;
    }
    std::fprintf(stderr, "kiln: conv with statistics %s: %s (few-channel kernel %.4f ms, %s %.4f ms)\n",
                 conv_problem_str(p).c_str(), way_name(chosen), few_ms, way_name(cudnn), cudnn_ms);
  }
  choices.set(be.graphs(), p, chosen);
  return workspace_bytes(be, p, chosen);
}

void run_conv_stats(CudaBackend& be, const ConvProblem& p, const void* x, const void* w, void* y, float* sum,
                    float* sqsum, void* reduce, size_t reduce_bytes, void* workspace, cudaStream_t stream,
                    const std::string& where) {
  const Way way = choices.at(be.graphs(), p, "convolution", where);
  run_way(be, p, way, x, w, y, sum, sqsum, reduce, reduce_bytes, workspace, stream, where);
}

}  // namespace kiln::cuda
