// cuDNN graph definitions: the tensors and nodes of each GraphKind, and the checks of a problem.
#include "runtime/cuda/cudnn_graph_defs.h"

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"

namespace kiln::cuda::detail {
namespace {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// dims {N,C,H,W} in NHWC memory order.
fe::graph::Tensor_attributes nhwc(const char* name, int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, c, h, w}).set_stride(
      {h * w * c, 1, w * c, c});
}

void make_output_nhwc(const TensorPtr& t, int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  t->set_uid(uid).set_dim({n, c, h, w}).set_stride({h * w * c, 1, w * c, c}).set_output(true);
}

void make_output_channels(const TensorPtr& t, int64_t uid, int64_t k) {
  t->set_uid(uid).set_dim({1, k, 1, 1}).set_stride({k, 1, k, k}).set_data_type(fe::DataType_t::FLOAT).set_output(
      true);
}

// Filter (K,R,S,C) in memory, dims {K,C,R,S} for cuDNN.
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

}  // namespace

fe::DataType_t fe_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32: return fe::DataType_t::FLOAT;
    case DType::F16: return fe::DataType_t::HALF;
    case DType::BF16: return fe::DataType_t::BFLOAT16;
    default: fail("cuDNN graphs: dtype {} is not supported (use F32, F16 or BF16)", dtype_name(dtype));
  }
}

void define_conv_graph(GraphKind kind, const ConvProblem& p, fe::graph::Graph& g) {
  const std::vector<int64_t> pad{p.pad, p.pad}, stride{p.stride, p.stride}, dilation{1, 1};
  auto W = [&] { return g.tensor(krsc("w", UID_W, p)); };
  auto X = [&] { return g.tensor(nhwc("x", UID_X, p.n, p.c, p.h, p.w)); };
  auto fprop = [&](const TensorPtr& x, const TensorPtr& w) {
    return g.conv_fprop(x, w,
                        fe::graph::Conv_fprop_attributes().set_padding(pad).set_stride(stride).set_dilation(dilation));
  };
  switch (kind) {
    case GraphKind::CONV_FPROP: {
      auto y = fprop(X(), W());
      make_output_nhwc(y, UID_Y, p.n, p.k, p.ho, p.wo);
      return;
    }
    case GraphKind::CONV_FPROP_GENSTATS: {
      auto y = fprop(X(), W());
      make_output_nhwc(y, UID_Y, p.n, p.k, p.ho, p.wo);
      auto [sum, sq_sum] = g.genstats(y, fe::graph::Genstats_attributes().set_name("stats"));
      make_output_channels(sum, UID_SUM, p.k);
      make_output_channels(sq_sum, UID_SQ_SUM, p.k);
      return;
    }
    case GraphKind::CONV_DGRAD: {
      auto dy = g.tensor(nhwc("dy", UID_DY, p.n, p.k, p.ho, p.wo));
      auto dx = g.conv_dgrad(
          dy, W(), fe::graph::Conv_dgrad_attributes().set_padding(pad).set_stride(stride).set_dilation(dilation));
      make_output_nhwc(dx, UID_DX, p.n, p.c, p.h, p.w);
      return;
    }
    case GraphKind::CONV_WGRAD: {
      auto dy = g.tensor(nhwc("dy", UID_DY, p.n, p.k, p.ho, p.wo));
      auto dw = g.conv_wgrad(
          dy, X(), fe::graph::Conv_wgrad_attributes().set_padding(pad).set_stride(stride).set_dilation(dilation));
      dw->set_uid(UID_DW).set_dim({p.k, p.c, p.r, p.s}).set_stride({p.c * p.r * p.s, 1, p.s * p.c, p.c}).set_output(
          true);
      return;
    }
    case GraphKind::CONV_SCALE_SHIFT_RELU: {
      auto conv = fprop(X(), W());  // virtual, fp32 (intermediate dtype)
      auto scale = g.tensor(per_channel("scale", UID_SCALE, p.k));
      auto shift = g.tensor(per_channel("shift", UID_SHIFT, p.k));
      auto scaled = g.pointwise(conv, scale, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
      auto shifted = g.pointwise(scaled, shift, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
      auto y = g.pointwise(shifted, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
      make_output_nhwc(y, UID_Y, p.n, p.k, p.ho, p.wo);
      return;
    }
  }
  fail("cuDNN graphs: unknown graph kind {}", int(kind));
}

void validate_problem(GraphKind kind, const ConvProblem& p) {
  auto bad = [&](const std::string& why) {
    fail("cuDNN graph {}: invalid convolution {}: {}", graph_kind_name(kind), conv_problem_str(p), why);
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

}  // namespace kiln::cuda::detail
