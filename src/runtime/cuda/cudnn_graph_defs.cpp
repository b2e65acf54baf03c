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

namespace {
std::vector<int64_t> krsc_dims(const ConvProblem& p) { return {p.k, p.filter_c(), p.r, p.s}; }
std::vector<int64_t> krsc_strides(const ConvProblem& p) {
  const int64_t c = p.filter_c();
  return {c * p.r * p.s, 1, p.s * c, c};
}
}  // namespace

fe::graph::Tensor_attributes krsc(const char* name, int64_t uid, const ConvProblem& p) {
  return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(krsc_dims(p)).set_stride(krsc_strides(p));
}

void make_output_krsc(const TensorPtr& t, int64_t uid, const ConvProblem& p) {
  t->set_uid(uid).set_dim(krsc_dims(p)).set_stride(krsc_strides(p)).set_output(true);
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
  return g.conv_fprop(x, w, with_window(fe::graph::Conv_fprop_attributes(), p));
}

namespace detail {

void validate_problem(const CudnnGraphDef& graph, const ConvProblem& p) {
  auto bad = [&](const std::string& why) {
    fail("cuDNN graph {}: invalid convolution {}: {}", graph.name, conv_problem_str(p), why);
  };
  if (p.n < 1 || p.h < 1 || p.w < 1 || p.c < 1 || p.k < 1 || p.r < 1 || p.s < 1)
    bad("n, h, w, c, k, r and s must all be at least 1");
  const ConvWindow& v = p.win;
  if (v.stride_h < 1 || v.stride_w < 1) bad("the strides must be at least 1");
  if (v.pad_top < 0 || v.pad_left < 0 || v.pad_bottom < 0 || v.pad_right < 0) bad("the paddings must be at least 0");
  if (v.dilation_h < 1 || v.dilation_w < 1) bad("the dilations must be at least 1");
  if (v.groups < 1 || p.c % v.groups != 0 || p.k % v.groups != 0)
    bad(fmt::format("groups {} must be at least 1 and divide both C ({}) and K ({})", v.groups, p.c, p.k));
  if (p.h + v.pad_top + v.pad_bottom < ConvWindow::extent(p.r, v.dilation_h) ||
      p.w + v.pad_left + v.pad_right < ConvWindow::extent(p.s, v.dilation_w))
    bad("the (dilated) filter is larger than the padded input");
  const int64_t ho = v.out_h(p.h, p.r), wo = v.out_w(p.w, p.s);
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
