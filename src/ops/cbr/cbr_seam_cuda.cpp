#include "ops/cbr/cbr_seam_cuda.h"

#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/conv/conv_stats_cuda.h"
#include "ops/conv/conv_wgrad_cuda.h"

namespace kiln::cuda {
namespace {

void need_input(const ConvProblem& p, const SeamInput& in, const std::string& where) {
  if (!in.x || !in.scale || !in.shift)
    fail("{}: a seam consumer of {} needs its input, scale and shift (the producer's conv_out, scale and shift); "
         "recompile the program",
         where, conv_problem_str(p));
  if (!in.applied)
    fail("{}: a seam consumer of {} needs its x_applied scratch to write the applied input; recompile the program",
         where, conv_problem_str(p));
}

// in.applied = relu(in.x * in.scale + in.shift) over x's rows, with bn_apply's expression (the one
// the producer's recomputed mask uses).
void seam_apply_input(const ConvProblem& p, const SeamInput& in, cudaStream_t stream, const std::string& where) {
  need_input(p, in, where);
  bn_apply(p.io, in.x, in.scale, in.shift, p.n * p.h * p.w, p.c, /*relu=*/true, in.applied, nullptr, nullptr, stream,
           where);
}

}  // namespace

size_t prepare_seam_conv_stats(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* w, void* y,
                               const std::string& where) {
  need_input(p, in, where);
  return prepare_conv_stats(be, p, in.applied, w, y, where);
}

void run_seam_conv_stats(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* w, void* y,
                         float* sum, float* sqsum, void* reduce, size_t reduce_bytes, void* workspace,
                         cudaStream_t stream, const std::string& where) {
  seam_apply_input(p, in, stream, where);
  run_conv_stats(be, p, in.applied, w, y, sum, sqsum, reduce, reduce_bytes, workspace, stream, where);
}

size_t prepare_seam_wgrad(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* dy, void* dw,
                          const std::string& where) {
  need_input(p, in, where);
  return prepare_wgrad(be, p, in.applied, dy, dw, where);
}

void run_seam_wgrad(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* dy, void* dw,
                    void* workspace, cudaStream_t stream, const std::string& where) {
  seam_apply_input(p, in, stream, where);
  run_wgrad(be, p, in.applied, dy, dw, workspace, stream, where);
}

}  // namespace kiln::cuda
