// The toolkit the op families define their cuDNN graphs with (the graphs themselves are in
// ops/<family>/*_cudnn_graphs_cuda.cpp), and the check of a problem every graph gets.
#include "runtime/cuda/cudnn_graph_defs.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "kiln/error.h"

namespace kiln::cuda {

fe::DataType_t fe_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32: return fe::DataType_t::FLOAT;
    case DType::F16: return fe::DataType_t::HALF;
    case DType::BF16: return fe::DataType_t::BFLOAT16;
    default: fail("cuDNN graphs: dtype {} is not supported (use F32, F16 or BF16)", dtype_name(dtype));
  }
}

fe::graph::Tensor_attributes nhwc(const char* name, int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, c, h, w}).set_stride(
      {h * w * c, 1, w * c, c});
}

void make_output_nhwc(const TensorPtr& t, int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  t->set_uid(uid).set_dim({n, c, h, w}).set_stride({h * w * c, 1, w * c, c}).set_output(true);
}

fe::graph::Tensor_attributes krsc(const char* name, int64_t uid, const ConvProblem& p) {
  return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({p.k, p.c, p.r, p.s}).set_stride(
      {p.c * p.r * p.s, 1, p.s * p.c, p.c});
}

fe::graph::Tensor_attributes per_channel(const char* name, int64_t uid, int64_t k) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({1, k, 1, 1})
      .set_stride({k, 1, k, k})
      .set_data_type(fe::DataType_t::FLOAT);
}

void make_output_channels(const TensorPtr& t, int64_t uid, int64_t k) {
  t->set_uid(uid).set_dim({1, k, 1, 1}).set_stride({k, 1, k, k}).set_data_type(fe::DataType_t::FLOAT).set_output(
      true);
}

TensorPtr conv_x(fe::graph::Graph& g, const ConvProblem& p) { return g.tensor(nhwc("x", UID_X, p.n, p.c, p.h, p.w)); }

TensorPtr conv_w(fe::graph::Graph& g, const ConvProblem& p) { return g.tensor(krsc("w", UID_W, p)); }

TensorPtr conv_fprop(fe::graph::Graph& g, const TensorPtr& x, const TensorPtr& w, const ConvProblem& p) {
  return g.conv_fprop(x, w,
                      fe::graph::Conv_fprop_attributes()
                          .set_padding({p.pad, p.pad})
                          .set_stride({p.stride, p.stride})
                          .set_dilation({1, 1}));
}

namespace detail {

void validate_problem(const CudnnGraphDef& graph, const ConvProblem& p) {
  auto bad = [&](const std::string& why) {
    fail("cuDNN graph {}: invalid convolution {}: {}", graph.name, conv_problem_str(p), why);
  };
  if (p.n < 1 || p.h < 1 || p.w < 1 || p.c < 1 || p.k < 1 || p.r < 1 || p.s < 1)
    bad("n, h, w, c, k, r and s must all be at least 1");
  if (p.stride < 1 || p.pad < 0) bad("stride must be at least 1 and pad at least 0");
  const int64_t ho = (p.h + 2 * p.pad - p.r) / p.stride + 1, wo = (p.w + 2 * p.pad - p.s) / p.stride + 1;
  if (p.h + 2 * p.pad < p.r || p.w + 2 * p.pad < p.s) bad("the filter is larger than the padded input");
  if (p.ho != ho || p.wo != wo)
    bad(fmt::format("ho x wo must be {} x {} (use make_conv_problem to fill them)", ho, wo));
  if (p.io != DType::F32 && p.io != DType::F16 && p.io != DType::BF16)
    bad(fmt::format("dtype {} is not supported (use F32, F16 or BF16)", dtype_name(p.io)));
}

std::string frontend_message(fe::error_t status) { return status.get_message(); }

bool frontend_step(const fe::error_t& status, const char* what, PlanChoice& c) {
  if (status.is_bad()) c.why_not = fmt::format("{} failed: {}", what, frontend_message(status));
  return status.is_good();
}

}  // namespace detail
}  // namespace kiln::cuda
