#include "ops/cbr/cbr_seam_cuda.h"

#include <cstdio>
#include <functional>
#include <optional>

#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/cbr/cbr_cudnn_graphs_cuda.h"
#include "ops/cbr/cbr_seam_kernels_cuda.h"
#include "ops/common/workspace_cuda.h"
#include "ops/conv/conv_stats_cuda.h"
#include "ops/conv/conv_wgrad_cuda.h"
#include "ops/conv/engine_choices.h"
#include "runtime/cuda/event_timing.h"
#include "runtime/cuda/scratch_buffers.h"

namespace kiln::cuda {
namespace {

// How a consumer convolves its applied input: cuDNN applies it as it loads x, or it is written
// to the op's scratch first.
enum class Way { kPrologue, kWritten };

// The choices made under each CudaOptions::seam_input (0 written, 1 prologue, 2 timed), for the
// forward and for wgrad: the graph caches are shared by programs whose cuDNN options agree, whatever
// they ask of the seams.
EngineChoices<Way> forward_choices[3], wgrad_choices[3];

// The prologue graphs' workspace: the fp16 copies of scale and shift, then the graph's own.
struct PrologueScratch {
  void *scale, *shift, *graph;
  size_t used;
};
PrologueScratch prologue_scratch(void* base, const ConvProblem& p, size_t graph_bytes) {
  WorkspaceLayout layout(base);
  PrologueScratch s;
  s.scale = layout.take(size_t(p.c) * 2), s.shift = layout.take(size_t(p.c) * 2);
  s.graph = layout.take(graph_bytes);
  s.used = layout.used();
  return s;
}

// Enqueues a prologue graph: the fp16 copies of scale and shift first, on the same stream.
void run_prologue(CudaBackend& be, const CudnnGraphDef& graph, const ConvProblem& p, const SeamInput& in,
                  Pointers ptr, void* workspace, cudaStream_t stream, const std::string& where) {
  const PrologueScratch s = prologue_scratch(workspace, p, 0);
  floats_to_halves(in.scale, p.c, s.scale, stream, where);
  floats_to_halves(in.shift, p.c, s.shift, stream, where);
  ptr.x = in.x;
  // The graph's scale and shift are fp16 (cbr_cudnn_graphs_cuda.h).
  ptr.scale = static_cast<const float*>(s.scale), ptr.shift = static_cast<const float*>(s.shift);
  be.graphs().run(graph, p, ptr, s.graph, stream, where);
}

int64_t output_rows(const ConvProblem& p) { return p.n * p.ho * p.wo; }

void need_input(const ConvProblem& p, const SeamInput& in, const std::string& where) {
  if (!in.x || !in.scale || !in.shift)
    fail("{}: a seam consumer of {} needs its input, scale and shift (the producer's conv_out, scale and shift); "
         "recompile the program",
         where, conv_problem_str(p));
}

void need_scratch(const ConvProblem& p, const SeamInput& in, const std::string& where) {
  if (!in.applied)
    fail("{}: a seam consumer of {} needs its x_applied scratch to write the applied input; recompile the program",
         where, conv_problem_str(p));
}

// in.applied = relu(in.x * in.scale + in.shift) over x's rows, with bn_apply's expression (the one
// the producer's recomputed mask uses).
void seam_apply_input(const ConvProblem& p, const SeamInput& in, cudaStream_t stream, const std::string& where) {
  need_input(p, in, where);
  need_scratch(p, in, where);
  bn_apply(p.io, in.x, in.scale, in.shift, p.n * p.h * p.w, p.c, /*relu=*/true, in.applied, nullptr, nullptr, stream,
           where);
}

// One of the consumer's convolutions (the forward with statistics, or wgrad) in both ways.
struct Convolution {
  const char* what;              // for messages: "forward" or "wgrad"
  const CudnnGraphDef& prologue;  // its prologue graph
  EngineChoices<Way>* choices;
  // The workspace bytes of a way, preparing it; a run of a way on `stream` with that workspace.
  std::function<size_t(Way)> workspace_bytes;
  std::function<void(Way, void* workspace, cudaStream_t)> run;
};

// Chooses the way (timing both, on the op's own tensors, where tuning timed the prologue's plans and
// CudaOptions::seam_input leaves the choice to timing) and returns its workspace bytes.
size_t prepare_way(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const Convolution& conv,
                   const std::string& where) {
  need_input(p, in, where);
  EngineChoices<Way>& choices = conv.choices[be.options().seam_input];
  if (const std::optional<Way> way = choices.find(be.graphs(), p)) return conv.workspace_bytes(*way);
  const int asked = be.options().seam_input;
  const bool prologue = asked != 0 && p.io == DType::F16 && be.graphs().supported(conv.prologue, p);
  Way chosen = prologue ? Way::kPrologue : Way::kWritten;
  double prologue_ms = 0, written_ms = 0;
  if (asked == 2 && prologue && in.applied && be.graphs().plan_ms(conv.prologue, p) > 0) {
    auto time = [&](Way way) {
      ScratchBuffers scratch;
      void* workspace = scratch.allocate(conv.workspace_bytes(way), where);
      return median_event_ms(
          be.stream(0), 5,
          [&] {
            conv.run(way, workspace, be.stream(0));
            return true;
          },
          where);
    };
    prologue_ms = time(Way::kPrologue);
    written_ms = time(Way::kWritten);
    if (written_ms >= 0 && (prologue_ms < 0 || written_ms < prologue_ms)) chosen = Way::kWritten;
  }
  if (chosen == Way::kWritten) need_scratch(p, in, where);
  std::fprintf(stderr, "kiln: seam consumer %s %s: %s (prologue %.4f ms, applied input written %.4f ms)\n",
               conv_problem_str(p).c_str(), conv.what,
               chosen == Way::kPrologue ? "cuDNN prologue graph" : "applied input written first", prologue_ms,
               written_ms);
  choices.set(be.graphs(), p, chosen);
  return conv.workspace_bytes(chosen);
}

Way chosen_way(CudaBackend& be, const ConvProblem& p, const Convolution& conv, const std::string& where) {
  return conv.choices[be.options().seam_input].at(be.graphs(), p, conv.what, where);
}

// The forward: the convolution with the per-channel sums of its output. The sums' reduce buffer
// is the caller's (channel_sums_workspace_bytes, used by the written way's sum kernel if any).
struct ForwardArgs {
  const void* w;
  void* y;
  float *sum, *sqsum;
  void* reduce;
  size_t reduce_bytes;
};

Convolution forward(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const ForwardArgs& a,
                    const std::string& where) {
  return {"forward", kSeamPrologueConvGenstatsGraph, forward_choices,
          [&be, p, in, a, where](Way way) -> size_t {
            if (way == Way::kPrologue)
              return prologue_scratch(nullptr, p, be.graphs().prepare(kSeamPrologueConvGenstatsGraph, p)).used;
            return prepare_conv_stats(be, p, in.applied, a.w, a.y, where);
          },
          [&be, p, in, a, where](Way way, void* workspace, cudaStream_t stream) {
            if (way == Way::kWritten) {
              seam_apply_input(p, in, stream, where);
              run_conv_stats(be, p, in.applied, a.w, a.y, a.sum, a.sqsum, a.reduce, a.reduce_bytes, workspace, stream,
                             where);
              return;
            }
            Pointers ptr;
            ptr.w = a.w, ptr.y = a.y, ptr.sum = a.sum, ptr.sq_sum = a.sqsum;
            run_prologue(be, kSeamPrologueConvGenstatsGraph, p, in, ptr, workspace, stream, where);
          }};
}

Convolution wgrad(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* dy, void* dw,
                  const std::string& where) {
  return {"wgrad", kSeamPrologueWgradGraph, wgrad_choices,
          [&be, p, in, dy, dw, where](Way way) -> size_t {
            if (way == Way::kPrologue)
              return prologue_scratch(nullptr, p, be.graphs().prepare(kSeamPrologueWgradGraph, p)).used;
            return prepare_wgrad(be, p, in.applied, dy, dw, where);
          },
          [&be, p, in, dy, dw, where](Way way, void* workspace, cudaStream_t stream) {
            if (way == Way::kWritten) {
              seam_apply_input(p, in, stream, where);
              run_wgrad(be, p, in.applied, dy, dw, workspace, stream, where);
              return;
            }
            Pointers ptr;
            ptr.dy = dy, ptr.dw = dw;
            run_prologue(be, kSeamPrologueWgradGraph, p, in, ptr, workspace, stream, where);
          }};
}

}  // namespace

size_t prepare_seam_conv_stats(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* w, void* y,
                               const std::string& where) {
  // Timing runs write the sums to scratch of their own.
  ScratchBuffers scratch;
  auto* sums = static_cast<float*>(scratch.allocate(2 * size_t(p.k) * sizeof(float), where));
  const size_t reduce_bytes = channel_sums_workspace_bytes(output_rows(p), p.k);
  void* reduce = scratch.allocate(reduce_bytes, where);
  return prepare_way(be, p, in, forward(be, p, in, {w, y, sums, sums + p.k, reduce, reduce_bytes}, where), where);
}

void run_seam_conv_stats(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* w, void* y,
                         float* sum, float* sqsum, void* reduce, size_t reduce_bytes, void* workspace,
                         cudaStream_t stream, const std::string& where) {
  need_input(p, in, where);
  const Convolution conv = forward(be, p, in, {w, y, sum, sqsum, reduce, reduce_bytes}, where);
  conv.run(chosen_way(be, p, conv, where), workspace, stream);
}

size_t prepare_seam_wgrad(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* dy, void* dw,
                          const std::string& where) {
  return prepare_way(be, p, in, wgrad(be, p, in, dy, dw, where), where);
}

void run_seam_wgrad(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* dy, void* dw,
                    void* workspace, cudaStream_t stream, const std::string& where) {
  need_input(p, in, where);
  const Convolution conv = wgrad(be, p, in, dy, dw, where);
  conv.run(chosen_way(be, p, conv, where), workspace, stream);
}

}  // namespace kiln::cuda
