#pragma once
// The cudnn-frontend side of the cuDNN graphs: the toolkit the op families define their graphs
// with (CudnnGraphDef, cudnn_graphs.h) — the fixed tensor uids, the frontend dtype, and the NHWC /
// KRSC / per-channel tensors of a ConvProblem — and, in detail, what the cache files of this
// folder share: the graph type whose plans can be inspected and the check of a problem.
//
// Includes cudnn_frontend.h (very slow to compile): only the cudnn_*.cpp files of this folder and
// the families' *_cudnn_graphs_cuda.cpp include this header (cudnn_graphs.h and the families'
// headers stay free of the frontend).
// The frontend defines a static function in a header that not every file uses (-Wunused-function).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <cudnn_frontend.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdint>
#include <memory>

#include "runtime/cuda/cudnn_graphs.h"

namespace kiln::cuda {

namespace fe = cudnn_frontend;

// ---- the toolkit of graph definitions ------------------------------------------------------------

// Fixed uids so that run() can map Pointers to the variant pack without looking up tensors: a
// graph's user tensor of role x takes UID_X and is read from (or written to) Pointers::x, and so on.
enum Uid : int64_t { UID_X = 1, UID_W, UID_Y, UID_DY, UID_DX, UID_DW, UID_SUM, UID_SQ_SUM, UID_SCALE, UID_SHIFT };

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// The frontend's dtype of F32, F16 or BF16 (kiln::Error for any other).
fe::DataType_t fe_dtype(DType dtype);

// An activation (n,h,w,c) in NHWC memory order, as dims {N,C,H,W} with NHWC strides; its dtype is
// the graph's io dtype.
fe::graph::Tensor_attributes nhwc(const char* name, int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w);
// Makes a node's result an NHWC output tensor (n,h,w,c) of the io dtype.
void make_output_nhwc(const TensorPtr& t, int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w);
// The filter (K,R,S,C/groups) in memory, as dims {K,C/groups,R,S} for cuDNN (which infers the
// groups from C / the filter's C).
fe::graph::Tensor_attributes krsc(const char* name, int64_t uid, const ConvProblem& p);
// Makes a node's result (a filter gradient) a KRSC output tensor of the io dtype, dims as krsc's.
void make_output_krsc(const TensorPtr& t, int64_t uid, const ConvProblem& p);
// An fp32 vector of k channels (dims {1,k,1,1}): scale, shift, statistics.
fe::graph::Tensor_attributes per_channel(const char* name, int64_t uid, int64_t k);
// Makes a node's result an fp32 per-channel output of k channels.
void make_output_channels(const TensorPtr& t, int64_t uid, int64_t k);

// The convolution's input x (UID_X) and filter w (UID_W) of `p`, added to `g`.
TensorPtr conv_x(fe::graph::Graph& g, const ConvProblem& p);
TensorPtr conv_w(fe::graph::Graph& g, const ConvProblem& p);
// Sets `p`'s window on a convolution node's attributes (Conv_fprop_, Conv_dgrad_ or
// Conv_wgrad_attributes): padding before (top, left) and after (bottom, right), strides and
// dilation, each as {h, w}. The groups are not an attribute: the filter's dims carry them.
template <class Attributes>
Attributes with_window(Attributes attributes, const ConvProblem& p) {
  const ConvWindow& v = p.win;
  attributes.set_pre_padding({v.pad_top, v.pad_left})
      .set_post_padding({v.pad_bottom, v.pad_right})
      .set_stride({v.stride_h, v.stride_w})
      .set_dilation({v.dilation_h, v.dilation_w});
  return attributes;
}

// The conv_fprop node of `p` (its window) on x and w; its result is virtual (fp32, the
// intermediate dtype) until made an output.
TensorPtr conv_fprop(fe::graph::Graph& g, const TensorPtr& x, const TensorPtr& w, const ConvProblem& p);

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

// kiln::Error naming the graph, the shape and what is wrong unless `p` is a valid problem (every
// graph takes a ConvProblem, so the check is the cache's, made before any definition runs).
void validate_problem(const CudnnGraphDef& graph, const ConvProblem& p);

std::string frontend_message(fe::error_t status);

// Whether a frontend call succeeded; if not, `c.why_not` says which call and why.
bool frontend_step(const fe::error_t& status, const char* what, PlanChoice& c);

}  // namespace detail
}  // namespace kiln::cuda
