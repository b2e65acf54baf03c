// kiln_cudnn_probe: which fused cuDNN graphs this GPU + cuDNN build, and how fast their best plan is,
// for the convolution shapes of docs/cudnn-support.md (see /work/shared/baselines/cudnn-h200.md).
// Prints a markdown table (one column per shape) and, below it, the plan names and failure reasons.
//
//   kiln_cudnn_probe [--batch N] [--dtype f16|bf16|f32] [--no-tune] [--allow-tf32] [--only TEXT]
//
// --only keeps the rows whose name contains TEXT (tuning every plan of every row takes minutes).
//
// Graphs the op families define (their CudnnGraphDefs, ops/<family>/*_cudnn_graphs_cuda.h) go
// through CudnnGraphs::prepare (the path the engine uses); the others are defined here directly and
// built/tuned by CudnnGraphs::probe.
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "ops/cbr/cbr_cudnn_graphs_cuda.h"
#include "ops/conv/conv_cudnn_graphs_cuda.h"
#include "runtime/cuda/cudnn_graphs.h"

namespace fe = cudnn_frontend;
using kiln::DType;
using kiln::cuda::ConvProblem;
using kiln::cuda::CudnnGraphDef;
using kiln::cuda::CudnnGraphs;
using kiln::cuda::PlanChoice;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

namespace {

struct Shape {
  int64_t c, k, r, hw;
};
const Shape kShapes[] = {{64, 64, 3, 56}, {64, 256, 1, 56}, {64, 64, 3, 224}, {256, 64, 1, 56}};

// ---- tensor helpers (NHWC activations as dims {N,C,H,W}, KRSC filters as dims {K,C,R,S}) ----------
TensorPtr activation(fe::graph::Graph& g, const char* name, int64_t n, int64_t c, int64_t h, int64_t w) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_dim({n, c, h, w}).set_stride(
      {h * w * c, 1, w * c, c}));
}
TensorPtr filter(fe::graph::Graph& g, const ConvProblem& p) {
  return g.tensor(fe::graph::Tensor_attributes().set_name("w").set_dim({p.k, p.c, p.r, p.s}).set_stride(
      {p.c * p.r * p.s, 1, p.s * p.c, p.c}));
}
// Per-channel vector; fp32 unless `io_typed` (then the graph's io dtype).
TensorPtr channels(fe::graph::Graph& g, const char* name, int64_t c, bool io_typed) {
  auto t = fe::graph::Tensor_attributes().set_name(name).set_dim({1, c, 1, 1}).set_stride({c, 1, c, c});
  if (!io_typed) t.set_data_type(fe::DataType_t::FLOAT);
  return g.tensor(t);
}
void stats_output(const TensorPtr& t, bool io_typed) {
  t->set_output(true);
  if (!io_typed) t->set_data_type(fe::DataType_t::FLOAT);
}
TensorPtr pw(fe::graph::Graph& g, TensorPtr a, TensorPtr b, fe::PointwiseMode_t mode) {
  return g.pointwise(a, b, fe::graph::Pointwise_attributes().set_mode(mode));
}
TensorPtr relu(fe::graph::Graph& g, TensorPtr a) {
  return g.pointwise(a, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
}
// scale·x + bias → ReLU over C channels: the previous layer's BN + ReLU as a prologue.
TensorPtr bn_relu_prologue(fe::graph::Graph& g, TensorPtr x, int64_t c, bool io_typed) {
  auto scaled = pw(g, x, channels(g, "prologue_scale", c, io_typed), fe::PointwiseMode_t::MUL);
  return relu(g, pw(g, scaled, channels(g, "prologue_bias", c, io_typed), fe::PointwiseMode_t::ADD));
}
// The probe's problems are square (make_conv_problem's square overload): one padding, one stride.
std::vector<int64_t> pad2(const ConvProblem& p) { return {p.win.pad_top, p.win.pad_left}; }
std::vector<int64_t> stride2(const ConvProblem& p) { return {p.win.stride_h, p.win.stride_w}; }

// ---- patterns CudnnGraphs does not offer --------------------------------------------------------
void sbr_conv_genstats(fe::graph::Graph& g, const ConvProblem& p, bool io_typed) {
  auto x = bn_relu_prologue(g, activation(g, "x", p.n, p.c, p.h, p.w), p.c, io_typed);
  auto y = g.conv_fprop(
      x, filter(g, p),
      fe::graph::Conv_fprop_attributes().set_padding(pad2(p)).set_stride(stride2(p)).set_dilation({1, 1}));
  y->set_output(true);
  auto [sum, sq_sum] = g.genstats(y, fe::graph::Genstats_attributes());
  stats_output(sum, false);
  stats_output(sq_sum, false);
}

void sbr_wgrad(fe::graph::Graph& g, const ConvProblem& p, bool io_typed) {
  auto x = bn_relu_prologue(g, activation(g, "x", p.n, p.c, p.h, p.w), p.c, io_typed);
  auto dy = activation(g, "dy", p.n, p.k, p.ho, p.wo);
  auto dw = g.conv_wgrad(
      dy, x, fe::graph::Conv_wgrad_attributes().set_padding(pad2(p)).set_stride(stride2(p)).set_dilation({1, 1}));
  dw->set_dim({p.k, p.c, p.r, p.s}).set_stride({p.c * p.r * p.s, 1, p.s * p.c, p.c}).set_output(true);
}

// conv_dgrad of a fresh dY and the filter: dX_conv, virtual until made an output.
TensorPtr conv_dgrad_of_dy(fe::graph::Graph& g, const ConvProblem& p) {
  auto dgrad = g.conv_dgrad(
      activation(g, "dy", p.n, p.k, p.ho, p.wo), filter(g, p),
      fe::graph::Conv_dgrad_attributes().set_padding(pad2(p)).set_stride(stride2(p)).set_dilation({1, 1}));
  dgrad->set_dim({p.n, p.c, p.h, p.w});
  return dgrad;
}

// dX_conv = dgrad(dY, W); dReLU against BN(X) recomputed from X and the saved statistics; then the
// BN weight-gradient reduction (dbn_weight) over the masked gradient.
void dgrad_drelu_dbn_weight(fe::graph::Graph& g, const ConvProblem& p, bool io_typed) {
  auto dgrad = conv_dgrad_of_dy(g, p);
  auto x = activation(g, "x", p.n, p.c, p.h, p.w);
  auto mean = channels(g, "mean", p.c, false), inv_var = channels(g, "inv_var", p.c, false);
  auto scale = channels(g, "scale", p.c, false), bias = channels(g, "bias", p.c, false);
  auto bn = pw(g, pw(g, pw(g, x, mean, fe::PointwiseMode_t::SUB), inv_var, fe::PointwiseMode_t::MUL), scale,
               fe::PointwiseMode_t::MUL);
  bn = pw(g, bn, bias, fe::PointwiseMode_t::ADD);
  auto drelu = pw(g, dgrad, bn, fe::PointwiseMode_t::RELU_BWD);
  drelu->set_output(true);
  auto outs = g.dbn_weight(drelu, x, mean, inv_var, scale, fe::graph::DBN_weight_attributes());
  for (auto& t : outs) stats_output(t, io_typed);
}

// Per-channel Σ over N, H, W (ADD reduction to {1,C,1,1}, fp32): the generic runtime-fusion
// engines' way to statistics where the genstats op does not build (bf16, fp32).
TensorPtr channel_sum(fe::graph::Graph& g, TensorPtr t, int64_t c) {
  auto sum = g.reduction(t, fe::graph::Reduction_attributes().set_mode(fe::ReductionMode_t::ADD).set_compute_data_type(
                                fe::DataType_t::FLOAT));
  sum->set_dim({1, c, 1, 1}).set_stride({c, 1, c, c});
  stats_output(sum, false);
  return sum;
}

// conv_fprop with Σy (and Σy² when `squares`) as reductions of its output.
void conv_reductions(fe::graph::Graph& g, const ConvProblem& p, bool squares) {
  auto y = g.conv_fprop(
      activation(g, "x", p.n, p.c, p.h, p.w), filter(g, p),
      fe::graph::Conv_fprop_attributes().set_padding(pad2(p)).set_stride(stride2(p)).set_dilation({1, 1}));
  y->set_output(true);
  channel_sum(g, y, p.k);
  if (squares) channel_sum(g, pw(g, y, y, fe::PointwiseMode_t::MUL), p.k);
}

// conv_dgrad → dReLU against the producer's output (x·scale + shift > 0, from its stored conv
// output x) → Σg and Σg·x as reductions: the producer's BN weight gradients in dgrad's epilogue.
void dgrad_drelu_reductions(fe::graph::Graph& g, const ConvProblem& p) {
  auto dgrad = conv_dgrad_of_dy(g, p);
  auto x = activation(g, "x", p.n, p.c, p.h, p.w);
  auto bn = pw(g, pw(g, x, channels(g, "scale", p.c, false), fe::PointwiseMode_t::MUL), channels(g, "shift", p.c, false),
               fe::PointwiseMode_t::ADD);
  auto g_masked = pw(g, dgrad, bn, fe::PointwiseMode_t::RELU_BWD);
  g_masked->set_output(true);
  channel_sum(g, g_masked, p.c);
  channel_sum(g, pw(g, g_masked, x, fe::PointwiseMode_t::MUL), p.c);
}

// conv_dgrad with the shortcut's gradient added in its epilogue: a ResNet block input's gradient,
// dX = dgrad(dY, W) + dS, written once, where kiln now writes dgrad's output and adds dS to it in
// a GRAD_SUM pass of its own.
void dgrad_add(fe::graph::Graph& g, const ConvProblem& p) {
  auto sum = pw(g, conv_dgrad_of_dy(g, p), activation(g, "dshortcut", p.n, p.c, p.h, p.w), fe::PointwiseMode_t::ADD);
  sum->set_output(true);
}

// BN backward over the conv output (K channels); `mask`: dY·mask first (mask BOOLEAN), written to
// memory when `write_masked`.
void bn_backward(fe::graph::Graph& g, const ConvProblem& p, bool mask, bool write_masked) {
  auto dy = activation(g, "dy", p.n, p.k, p.ho, p.wo);
  if (mask) {
    auto m = activation(g, "mask", p.n, p.k, p.ho, p.wo);
    m->set_data_type(fe::DataType_t::BOOLEAN);
    dy = pw(g, dy, m, fe::PointwiseMode_t::MUL);
    if (write_masked) dy->set_output(true);
  }
  auto x = activation(g, "conv_out", p.n, p.k, p.ho, p.wo);
  auto gamma = channels(g, "gamma", p.k, false);
  auto mean = channels(g, "mean", p.k, false), inv_var = channels(g, "inv_var", p.k, false);
  auto [dx, dgamma, dbeta] = g.batchnorm_backward(
      dy, x, gamma, fe::graph::Batchnorm_backward_attributes().set_saved_mean_and_inv_variance(mean, inv_var));
  dx->set_output(true);
  stats_output(dgamma, false);
  stats_output(dbeta, false);
}

// ---- table ---------------------------------------------------------------------------------------
struct Cell {
  std::string text;
  std::string detail;
};

std::string timing_text(bool tuned, double best, double first, int tried) {
  if (!tuned) return "supported (untimed)";
  return fmt::format("{:.3f} ms ({} plans, heuristic first {:.3f})", best, tried, first);
}

std::string first_line(const std::string& s, size_t max = 240) {
  std::string line = s.substr(0, s.find('\n'));
  return line.size() > max ? line.substr(0, max) + "..." : line;
}

Cell kind_cell(CudnnGraphs& graphs, const CudnnGraphDef& graph, const ConvProblem& p) {
  try {
    graphs.prepare(graph, p);
  } catch (const kiln::Error& e) {
    return {"not supported", first_line(e.what(), 400)};
  }
  for (const auto& r : graphs.tune_records()) {
    const auto& q = r.problem;
    if (r.kind == graph.name && q.n == p.n && q.h == p.h && q.c == p.c && q.k == p.k &&
        q.r == p.r && q.io == p.io)
      return {timing_text(graphs.options().tune, r.best_plan_ms, r.first_plan_ms, r.plans_tried),
              fmt::format("{} of {} offered; plan {}; workspace {} B{}", r.plans_tried, r.plans_offered, r.plan_name,
                          r.workspace, r.deterministic ? "" : "; NONDETERMINISTIC")};
  }
  return {"supported", ""};
}

struct Variant {
  const char* label;  // shown in the cell when it is not the first variant
  std::function<void(fe::graph::Graph&)> define;
};

Cell probe_cell(CudnnGraphs& graphs, DType io, const std::vector<Variant>& variants) {
  std::string failures;
  for (size_t i = 0; i < variants.size(); ++i) {
    PlanChoice c = graphs.probe(variants[i].define, io);
    if (c.supported) {
      std::string text = timing_text(graphs.options().tune, c.best_plan_ms, c.first_plan_ms, c.plans_tried);
      if (i > 0) text += fmt::format(" [{}]", variants[i].label);
      return {text, fmt::format("{} of {} offered; plan {}; workspace {} B{}{}", c.plans_tried, c.plans_offered,
                                c.plan_name, c.workspace, c.deterministic ? "" : "; NONDETERMINISTIC",
                                failures.empty() ? "" : "; earlier variants failed: " + failures)};
    }
    failures += fmt::format("[{}] {} ", variants[i].label, first_line(c.why_not));
  }
  return {"not supported", failures};
}

const char* dtype_arg_name(DType d) { return d == DType::F32 ? "f32" : d == DType::BF16 ? "bf16" : "f16"; }

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 256;
  DType io = DType::F16;
  kiln::cuda::CudnnGraphsOptions options;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch" && i + 1 < argc) {
      batch = std::atoll(argv[++i]);
    } else if (a == "--dtype" && i + 1 < argc) {
      const std::string d = argv[++i];
      io = d == "f32" ? DType::F32 : d == "bf16" ? DType::BF16 : DType::F16;
    } else if (a == "--no-tune") {
      options.tune = false;
    } else if (a == "--allow-tf32") {
      options.allow_tf32 = true;
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--batch N] [--dtype f16|bf16|f32] [--no-tune] [--allow-tf32] [--only TEXT]\n", argv[0]);
      return 2;
    }
  }
  if (batch < 1) {
    std::fprintf(stderr, "--batch must be at least 1\n");
    return 2;
  }
  try {
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      std::fprintf(stderr, "no CUDA device\n");
      return 1;
    }
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    CudnnGraphs graphs(options);
    fmt::print("# cuDNN fused-graph probe\n\n");
    fmt::print("- device: {} (sm_{}{}, {} SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    fmt::print("- cuDNN (runtime) {}, cuDNN headers {}, cudnn-frontend {}.{}.{}, CUDA runtime {}\n", cudnnGetVersion(),
               CUDNN_VERSION, CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION,
               runtime);
    fmt::print("- batch {}, io {}, compute fp32, NHWC/KRSC, stride 1, pad R/2; tuning {}{}\n", batch,
               dtype_arg_name(io), graphs.options().tune ? "on (heuristics A + FALLBACK, every plan built and "
                                                         "timed: 1 warm-up + median of 5)"
                                                       : "off (heuristics' first plan)",
               io == DType::F32 ? (options.allow_tf32 ? ", TF32 allowed" : ", TF32 excluded") : "");
    fmt::print("- cell: best plan time (plans timed, time of the heuristics' first plan)\n\n");

    std::vector<ConvProblem> problems;
    for (const Shape& s : kShapes)
      problems.push_back(kiln::cuda::make_conv_problem(batch, s.hw, s.hw, s.c, s.k, s.r, s.r, 1, s.r / 2, io));

    using Row = std::pair<std::string, std::function<Cell(const ConvProblem&)>>;
    auto kind_row = [&](const char* name, const CudnnGraphDef& graph) {
      return Row{name, [&graphs, &graph](const ConvProblem& p) { return kind_cell(graphs, graph, p); }};
    };
    auto probe_row = [&](const char* name, auto define_variants) {
      return Row{name, [&graphs, io, define_variants](const ConvProblem& p) {
                   return probe_cell(graphs, io, define_variants(p));
                 }};
    };
    std::vector<Row> rows = {
        kind_row("conv_fprop", kiln::cuda::kConvFpropGraph),
        kind_row("conv_fprop + genstats (sum, sum²)", kiln::cuda::kConvFpropGenstatsGraph),
        probe_row("scale·x+bias → ReLU → conv_fprop + genstats (BN of the previous layer in the prologue)",
                  [](const ConvProblem& p) {
                    return std::vector<Variant>{
                        {"fp32 scale/bias", [p](fe::graph::Graph& g) { sbr_conv_genstats(g, p, false); }},
                        {"io-dtype scale/bias", [p](fe::graph::Graph& g) { sbr_conv_genstats(g, p, true); }}};
                  }),
        probe_row("conv_fprop + Σy, Σy² as reductions (generic runtime fusion)",
                  [](const ConvProblem& p) {
                    return std::vector<Variant>{
                        {"Σy and Σy²", [p](fe::graph::Graph& g) { conv_reductions(g, p, true); }},
                        {"Σy only", [p](fe::graph::Graph& g) { conv_reductions(g, p, false); }}};
                  }),
        kind_row("conv_dgrad", kiln::cuda::kConvDgradGraph),
        probe_row("conv_dgrad → dReLU (recomputed from BN of X) → dbn_weight",
                  [](const ConvProblem& p) {
                    return std::vector<Variant>{
                        {"fp32 outputs", [p](fe::graph::Graph& g) { dgrad_drelu_dbn_weight(g, p, false); }},
                        {"io-dtype outputs", [p](fe::graph::Graph& g) { dgrad_drelu_dbn_weight(g, p, true); }}};
                  }),
        probe_row("conv_dgrad → dReLU (x·scale+shift > 0) → Σg, Σg·x as reductions",
                  [](const ConvProblem& p) {
                    return std::vector<Variant>{{"", [p](fe::graph::Graph& g) { dgrad_drelu_reductions(g, p); }}};
                  }),
        probe_row("conv_dgrad + dS (the shortcut's gradient added in the epilogue)",
                  [](const ConvProblem& p) {
                    return std::vector<Variant>{{"", [p](fe::graph::Graph& g) { dgrad_add(g, p); }}};
                  }),
        kind_row("conv_wgrad", kiln::cuda::kConvWgradGraph),
        probe_row("scale·x+bias → ReLU → conv_wgrad",
                  [](const ConvProblem& p) {
                    return std::vector<Variant>{
                        {"fp32 scale/bias", [p](fe::graph::Graph& g) { sbr_wgrad(g, p, false); }},
                        {"io-dtype scale/bias", [p](fe::graph::Graph& g) { sbr_wgrad(g, p, true); }}};
                  }),
        kind_row("inference: conv → ·scale → +shift → ReLU", kiln::cuda::kConvScaleShiftReluGraph),
        probe_row("batchnorm_backward, no mask",
                  [](const ConvProblem& p) {
                    return std::vector<Variant>{{"", [p](fe::graph::Graph& g) { bn_backward(g, p, false, false); }}};
                  }),
        probe_row("dY·mask (virtual) → batchnorm_backward",
                  [](const ConvProblem& p) {
                    return std::vector<Variant>{{"", [p](fe::graph::Graph& g) { bn_backward(g, p, true, false); }}};
                  }),
        probe_row("dY·mask (also written out) → batchnorm_backward",
                  [](const ConvProblem& p) {
                    return std::vector<Variant>{{"", [p](fe::graph::Graph& g) { bn_backward(g, p, true, true); }}};
                  }),
    };

    fmt::print("| graph |");
    for (const Shape& s : kShapes) fmt::print(" {}→{} {}x{} @{}² |", s.c, s.k, s.r, s.r, s.hw);
    fmt::print("\n| --- |");
    for (size_t i = 0; i < std::size(kShapes); ++i) fmt::print(" --- |");
    fmt::print("\n");
    std::vector<std::string> details;
    for (const auto& [name, make_cell] : rows) {
      if (!only.empty() && name.find(only) == std::string::npos) continue;
      fmt::print("| {} |", name);
      for (size_t i = 0; i < problems.size(); ++i) {
        Cell c = make_cell(problems[i]);
        fmt::print(" {} |", c.text);
        details.push_back(fmt::format("- {} @ {}→{} {}x{} @{}²: {}", name, kShapes[i].c, kShapes[i].k, kShapes[i].r,
                                      kShapes[i].r, kShapes[i].hw, c.detail));
      }
      fmt::print("\n");
      std::fflush(stdout);
    }
    fmt::print("\n## Details\n\n");
    for (const auto& d : details) fmt::print("{}\n", d);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_cudnn_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
