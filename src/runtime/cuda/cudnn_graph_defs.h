#pragma once
// The cudnn-frontend side shared by the cuDNN graph files: the graph type whose plans can be
// inspected, the fixed tensor uids, and the definition of each GraphKind's tensors and nodes.
//
// Includes cudnn_frontend.h (very slow to compile): only the cudnn_*.cpp files of this folder
// include this header (cudnn_graphs.h stays free of the frontend).
// The frontend defines a static function in a header that not every file uses (-Wunused-function).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <cudnn_frontend.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdint>

#include "runtime/cuda/cudnn_graphs.h"

namespace kiln::cuda {

namespace fe = cudnn_frontend;

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

// Fixed uids so that run() can map Pointers to the variant pack without looking up tensors.
enum Uid : int64_t { UID_X = 1, UID_W, UID_Y, UID_DY, UID_DX, UID_DW, UID_SUM, UID_SQ_SUM, UID_SCALE, UID_SHIFT };

// The frontend's dtype of F32, F16 or BF16 (kiln::Error for any other).
fe::DataType_t fe_dtype(DType dtype);

// Adds the tensors and nodes of `kind` for problem `p` to an empty graph.
void define_conv_graph(GraphKind kind, const ConvProblem& p, fe::graph::Graph& g);

// kiln::Error naming the kind, the shape and what is wrong unless `p` is a valid problem.
void validate_problem(GraphKind kind, const ConvProblem& p);

std::string frontend_message(fe::error_t status);

// Whether a frontend call succeeded; if not, `c.why_not` says which call and why.
bool frontend_step(const fe::error_t& status, const char* what, PlanChoice& c);

}  // namespace detail
}  // namespace kiln::cuda
