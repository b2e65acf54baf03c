// oneDNN's fp32 convolutions for the CPU backend (conv_onednn_cpu.h). Activations stay in kiln's
// NHWC; the filters go to the layout oneDNN picks for the problem (its fast kernels want blocked
// filters; with NHWC filters it falls back to its reference code) and come back as KRSC, once per
// call: a filter is small beside the activations it meets.
#include "ops/conv/conv_onednn_cpu.h"

#include "core/cpu_kernels.h"
#include "core/op_scratch.h"
#include "core/scratch_layout.h"

#if KILN_WITH_ONEDNN
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>

#include "core/parallel.h"
#include "kiln/error.h"
#endif

namespace kiln::cpu {

#if KILN_WITH_ONEDNN
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;

// Pieces the batch is cut into (at most; fewer when the batch is small): enough for 16 threads.
constexpr int64_t kPieces = 16;
// The most memory wgrad's per-piece partial filter gradients may take; bigger filters get fewer,
// larger pieces, and each piece is cut into slices of output channels instead (k_slices).
constexpr size_t kPartialBytes = size_t{64} << 20;
// oneDNN's blocked filter layouts group output channels by 16 (AVX-512; 8 on AVX2): a slice of a
// multiple of 16 fills whole blocks.
constexpr int64_t kSliceChannels = 16;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// oneDNN's OpenMP runs one thread per caller: kiln's pool supplies the parallelism.
dnnl::stream& this_thread_stream() {
  omp_set_num_threads(1);
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

std::atomic<int64_t> scratch_fallbacks{0};

// `bytes` of scratch for one call, 64-byte aligned: the op's (core/op_scratch.h), which its
// prepare hook asked for, else this thread's own buffer, grown as needed (none for 0 bytes).
std::byte* call_scratch(size_t bytes) {
  if (bytes == 0) return nullptr;
  const OpScratch lent = op_scratch();
  if (lent.base && lent.bytes >= bytes) return lent.base;
  scratch_fallbacks.fetch_add(1, std::memory_order_relaxed);
  thread_local std::vector<std::byte> own;
  if (own.size() < bytes + 64) own.resize(bytes + 64);
  const auto at = reinterpret_cast<uintptr_t>(own.data());
  return own.data() + ((64 - at % 64) % 64);
}

size_t aligned64(size_t bytes) { return (bytes + 63) / 64 * 64; }

// The largest divisor of g.n that is at most g.n / kPieces (and at least 1): equal pieces, one set
// of primitives.
int64_t piece_images(const ConvGeom& g, int64_t least = 1) {
  int64_t best = g.n;
  for (int64_t d = std::max<int64_t>(1, g.n / kPieces); d <= g.n; ++d)
    if (g.n % d == 0 && d >= least) {
      best = d;
      break;
    }
  return best;
}

// The most slices, at most `most`, that cut k output channels into equal slices of a multiple of
// kSliceChannels; 1 where none does.
int64_t channel_slices(int64_t k, int64_t most) {
  for (int64_t s = most; s > 1; --s)
    if (k % s == 0 && (k / s) % kSliceChannels == 0) return s;
  return 1;
}

// The output-channel slices wgrad cuts each of its `pieces` into, so that a filter too big for
// kPieces partial gradients still makes about kPieces tasks (ResNet's 512x512x3x3 filters: 2
// pieces of a batch of 32, 8 slices of 64 channels). Like the pieces, a function of the problem
// alone: the bytes do not depend on the thread count. Grouped filters (C / groups channels each)
// are small beside their activations and are not sliced.
int64_t k_slices(const ConvGeom& g, int64_t pieces) {
  return g.win.groups == 1 ? channel_slices(g.k, (kPieces + pieces - 1) / pieces) : 1;
}

// How wgrad cuts its work: batch pieces few enough that their partial gradients fit
// kPartialBytes, each cut into `slices` of output channels; one task computes one slice's
// gradient over one piece.
struct WgradCut {
  int64_t images, pieces, slices;
  ConvGeom slice_geom;  // one task's problem: g with K / slices output channels
};
WgradCut wgrad_cut(const ConvGeom& g) {
  const size_t filter_bytes = size_t(g.k * g.r * g.s * g.cg + g.k) * sizeof(float);
  const int64_t most_pieces = std::max<int64_t>(1, int64_t(kPartialBytes / (2 * filter_bytes)));
  WgradCut cut;
  cut.images = piece_images(g, (g.n + most_pieces - 1) / most_pieces);
  cut.pieces = g.n / cut.images;
  cut.slices = k_slices(g, cut.pieces);
  cut.slice_geom = g;
  cut.slice_geom.k = g.k / cut.slices;
  cut.slice_geom.kg = cut.slice_geom.k / g.win.groups;  // slices only where there is one group
  return cut;
}

memory::dims nchw(int64_t n, int64_t c, int64_t h, int64_t w) { return {n, c, h, w}; }

// The filters' dimensions as oneDNN counts them: (K, C, R, S), or with groups (G, K / G, C / G, R,
// S); kiln's KRSC layout of them (ohwi, gohwi: K = g * K/G + o, each filter R x S x C/G).
memory::dims weight_dims(const ConvGeom& g) {
  if (g.win.groups == 1) return {g.k, g.c, g.r, g.s};
  return {g.win.groups, g.kg, g.cg, g.r, g.s};
}
Tag krsc_tag(const ConvGeom& g) { return g.win.groups == 1 ? Tag::ohwi : Tag::gohwi; }

// The problem of one piece of `images` images, as oneDNN's descriptors. oneDNN counts dilation
// from 0 (0: taps side by side) where kiln, as PyTorch, counts it from 1.
struct Descs {
  memory::desc src, dst, weights_any, weights_krsc, bias;
  memory::dims strides, dilates, padding_l, padding_r;
};
Descs descs(const ConvGeom& g, int64_t images) {
  const ConvWindow& v = g.win;
  Descs d;
  d.src = memory::desc(nchw(images, g.c, g.h, g.w), kF32, Tag::nhwc);
  d.dst = memory::desc(nchw(images, g.k, g.ho, g.wo), kF32, Tag::nhwc);
  d.weights_any = memory::desc(weight_dims(g), kF32, Tag::any);
  d.weights_krsc = memory::desc(weight_dims(g), kF32, krsc_tag(g));
  d.bias = memory::desc({g.k}, kF32, Tag::x);
  d.strides = {v.stride_h, v.stride_w};
  d.dilates = {v.dilation_h - 1, v.dilation_w - 1};
  d.padding_l = {v.pad_top, v.pad_left};
  d.padding_r = {v.pad_bottom, v.pad_right};
  return d;
}

// The scratchpad comes from the caller; with bf16 math (CpuKernels::OneDnnBf16) oneDNN may round
// the fp32 inputs to bf16 and add their products in fp32 (its fpmath mode, which it uses where the
// CPU has bf16 instructions).
dnnl::primitive_attr attributes(bool bf16_math) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (bf16_math) attr.set_fpmath_mode(dnnl::fpmath_mode::bf16);
  return attr;
}

dnnl::convolution_forward::primitive_desc forward_desc(const ConvGeom& g, int64_t images, bool bias,
                                                       bool bf16_math) {
  const Descs d = descs(g, images);
  using F = dnnl::convolution_forward;
  const auto prop = dnnl::prop_kind::forward_training;
  const auto direct = dnnl::algorithm::convolution_direct;
  return bias ? F::primitive_desc(cpu_engine(), prop, direct, d.src, d.weights_any, d.bias, d.dst, d.strides,
                                  d.dilates, d.padding_l, d.padding_r, attributes(bf16_math))
              : F::primitive_desc(cpu_engine(), prop, direct, d.src, d.weights_any, d.dst, d.strides, d.dilates,
                                  d.padding_l, d.padding_r, attributes(bf16_math));
}

// Whether oneDNN's implementation computes in bf16 (its name names the instructions: AMX or
// AVX-512 BF16).
bool bf16_impl(const char* impl) { return std::strstr(impl, "amx") || std::strstr(impl, "bf16"); }

// OneDnnBf16 asks for bf16 math, which oneDNN only takes as leave to use it: on a CPU without bf16
// instructions it would quietly compute in fp32. So a ResNet-shaped forward convolution is made
// once, and if oneDNN does not run it in bf16 the choice is refused, naming the fix.
void check_bf16_math_runs() {
  static const std::string impl = [] {
    omp_set_num_threads(1);
    ConvGeom g = ConvGeom::make({2, 14, 14, 64}, {64, 3, 3, 64}, 1, 1);
    return std::string(forward_desc(g, g.n, false, true).impl_info_str());
  }();
  static const bool runs = bf16_impl(impl.c_str());  // prim() asks on every call
  if (!runs)
    fail("--cpu-kernels onednn-bf16 (KILN_CPU_KERNELS, CompileOptions::cpu.kernels = 3) needs a CPU with bf16 "
         "instructions (AMX or AVX-512 BF16); on this one oneDNN computes in fp32 ({}): use --cpu-kernels onednn",
         impl);
}

// A primitive oneDNN runs fast: created once per problem, with the layout its filters take; none
// where only oneDNN's reference implementation takes the problem.
struct Prim {
  bool usable = false;
  dnnl::primitive primitive;
  memory::desc weights, scratchpad, krsc;  // krsc: the filters as kiln holds them
  bool reordered = false;                  // the primitive's filter layout is not KRSC
  // KRSC <-> the primitive's layout, in slices of output channels run side by side (copy_filters):
  // slice i of each side as a region of the whole (its offset in the desc), and its two reorders.
  std::vector<memory::desc> krsc_parts, prim_parts;
  std::vector<dnnl::reorder> to_prim, from_prim;
};

bool fast(const char* impl) { return std::strncmp(impl, "ref", 3) != 0; }

// The slices a filter copy is cut into: a 512x512x3x3 filter (9.4 MB) takes one thread ~2 ms,
// long enough to matter while the pool's other threads wait. Slices of a multiple of 16 output
// channels (whole blocks of any layout oneDNN picks) and of at least kCopySliceFloats (smaller
// copies cost less than handing them out), at most kPieces; one where the layout pads a dimension
// (a reorder writes the padding's zeros only when it writes the whole), or where the filters are
// grouped (small: C / groups channels each).
constexpr int64_t kCopySliceFloats = int64_t{1} << 16;
int64_t copy_slices(const memory::desc& weights, const ConvGeom& g) {
  if (g.win.groups != 1 || weights.get_padded_dims() != weights.get_dims()) return 1;
  const int64_t floats = int64_t(weights.get_size() / sizeof(float));
  return channel_slices(g.k, std::min(kPieces, floats / kCopySliceFloats));
}

template <class PD>
void finish(Prim& p, const PD& pd, const memory::desc& weights, const ConvGeom& g) {
  p.usable = fast(pd.impl_info_str());
  if (!p.usable) return;
  p.weights = weights;
  p.scratchpad = pd.scratchpad_desc();
  const memory::desc krsc = descs(g, 1).weights_krsc;
  p.krsc = krsc;
  p.reordered = weights != krsc;
  if (!p.reordered) return;
  const int64_t slices = copy_slices(weights, g), ks = g.k / slices;
  for (int64_t i = 0; i < slices; ++i) {
    // One slice: the whole filters (also the only way for grouped ones).
    const memory::dims part{ks, g.cg, g.r, g.s}, at{i * ks, 0, 0, 0};
    const memory::desc krsc_part = slices == 1 ? krsc : krsc.submemory_desc(part, at);
    const memory::desc prim_part = slices == 1 ? weights : weights.submemory_desc(part, at);
    p.krsc_parts.push_back(krsc_part);
    p.prim_parts.push_back(prim_part);
    p.to_prim.emplace_back(dnnl::reorder::primitive_desc(cpu_engine(), krsc_part, cpu_engine(), prim_part));
    p.from_prim.emplace_back(dnnl::reorder::primitive_desc(cpu_engine(), prim_part, cpu_engine(), krsc_part));
  }
}

enum class Kind { kForward, kDgrad, kWgrad };

std::atomic<int64_t> primitives_made{0};

Prim make(Kind kind, const ConvGeom& g, int64_t images, bool bias, bool bf16_math) {
  primitives_made.fetch_add(1, std::memory_order_relaxed);
  // A primitive sizes its work split (and its scratchpad) for the threads OpenMP would give it when
  // made: one, as each piece runs on one.
  omp_set_num_threads(1);
  Prim p;
  try {
    const Descs d = descs(g, images);
    if (kind == Kind::kForward) {
      const auto pd = forward_desc(g, images, bias, bf16_math);
      p.primitive = dnnl::convolution_forward(pd);
      finish(p, pd, pd.weights_desc(), g);
    } else if (kind == Kind::kDgrad) {
      using B = dnnl::convolution_backward_data;
      const B::primitive_desc pd(cpu_engine(), dnnl::algorithm::convolution_direct, d.src, d.weights_any, d.dst,
                                 d.strides, d.dilates, d.padding_l, d.padding_r,
                                 forward_desc(g, images, false, bf16_math), attributes(bf16_math));
      p.primitive = B(pd);
      finish(p, pd, pd.weights_desc(), g);
    } else {
      using W = dnnl::convolution_backward_weights;
      const auto direct = dnnl::algorithm::convolution_direct;
      const auto hint = forward_desc(g, images, bias, bf16_math);
      const W::primitive_desc pd =
          bias ? W::primitive_desc(cpu_engine(), direct, d.src, d.weights_any, d.bias, d.dst, d.strides, d.dilates,
                                   d.padding_l, d.padding_r, hint, attributes(bf16_math))
               : W::primitive_desc(cpu_engine(), direct, d.src, d.weights_any, d.dst, d.strides, d.dilates,
                                   d.padding_l, d.padding_r, hint, attributes(bf16_math));
      p.primitive = W(pd);
      finish(p, pd, pd.diff_weights_desc(), g);
    }
  } catch (const dnnl::error&) {
    p.usable = false;  // oneDNN has no implementation: the reference kernel runs it
  }
  return p;
}

// One Prim per problem and math (the kernels chosen now), made on first use and kept for the
// process.
const Prim& prim(Kind kind, const ConvGeom& g, int64_t images, bool bias) {
  const bool bf16_math = cpu_kernels() == CpuKernels::OneDnnBf16;
  if (bf16_math) check_bf16_math_runs();
  const ConvWindow& v = g.win;
  using Window = std::tuple<int, int, int, int, int, int, int, int, int>;
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, Window, bool, bool>;
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<Prim>> prims;
  const Window window{v.stride_h, v.stride_w,   v.pad_top,  v.pad_left, v.pad_bottom,
                      v.pad_right, v.dilation_h, v.dilation_w, v.groups};
  const Key key{int(kind), images, g.h, g.w, g.c, g.k, g.r, g.s, window, bias, bf16_math};
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Prim>& p = prims[key];
  if (!p) p = std::make_unique<Prim>(make(kind, g, images, bias, bf16_math));
  return *p;
}

memory wrap(const memory::desc& desc, const void* data) {
  return memory(desc, cpu_engine(), const_cast<void*>(data));
}

bool onednn_on() { return uses_onednn(cpu_kernels()); }

// Copies whole filters from KRSC to the primitive's layout (to_prim) or back, the slices side by
// side on kiln's pool (one after another where the caller already runs on it).
void copy_filters(const Prim& p, bool to_prim, const float* from, float* to) {
  parallel_for(int64_t(p.krsc_parts.size()), [&](int64_t i) {
    const size_t slice = size_t(i);
    dnnl::stream& s = this_thread_stream();
    memory krsc = wrap(p.krsc_parts[slice], to_prim ? from : to), other = wrap(p.prim_parts[slice], to_prim ? to : from);
    if (to_prim) p.to_prim[slice].execute(s, krsc, other);
    else p.from_prim[slice].execute(s, other, krsc);
    s.wait();
  });
}

// Where a forward or dgrad call keeps its things in its scratch: the filters in the primitive's
// layout (where that is not KRSC), then each task's scratchpad. Measured (base nullptr) when the
// program is prepared, taken when the op runs.
struct DataScratch {
  float* filters = nullptr;
  std::byte* tasks = nullptr;
  size_t task_stride = 0, bytes = 0;
};
DataScratch data_scratch(const Prim& p, int64_t tasks, std::byte* base) {
  ScratchLayout layout(base);
  DataScratch s;
  if (p.reordered) s.filters = layout.floats(int64_t(p.weights.get_size() / sizeof(float)));
  s.task_stride = aligned64(p.scratchpad.get_size());
  s.tasks = static_cast<std::byte*>(layout.take(s.task_stride * size_t(tasks)));
  s.bytes = layout.used();
  return s;
}

// The same for a wgrad call: the pieces' partial gradients (and bias gradients), then each task's
// scratchpad and, where the filters are cut into slices, its dense slice of dy.
struct WgradScratch {
  float *partial = nullptr, *partial_bias = nullptr;
  std::byte* tasks = nullptr;
  size_t scratchpad_bytes = 0, task_stride = 0, bytes = 0;
};
WgradScratch wgrad_scratch(const Prim& p, const ConvGeom& g, const WgradCut& cut, bool bias, std::byte* base) {
  ScratchLayout layout(base);
  WgradScratch s;
  s.partial = layout.floats(cut.pieces * cut.slices * int64_t(p.weights.get_size() / sizeof(float)));
  if (bias) s.partial_bias = layout.floats(cut.pieces * g.k);
  s.scratchpad_bytes = aligned64(p.scratchpad.get_size());
  const size_t dense =
      cut.slices > 1 ? aligned64(size_t(cut.images * g.ho * g.wo * cut.slice_geom.k) * sizeof(float)) : 0;
  s.task_stride = s.scratchpad_bytes + dense;
  s.tasks = static_cast<std::byte*>(layout.take(s.task_stride * size_t(cut.pieces * cut.slices)));
  s.bytes = layout.used();
  return s;
}

// The filters in the primitive's layout (KRSC itself where they agree), in the call's scratch.
const void* filters_for(const Prim& p, const float* w, const DataScratch& s) {
  if (!p.reordered) return w;
  copy_filters(p, true, w, s.filters);
  return s.filters;
}

// Runs body(task, stream, scratchpad) for each of `tasks` tasks on kiln's pool; task i's
// scratchpad starts at tasks + i * stride.
template <class F>
void for_each_task(int64_t tasks, const Prim& p, std::byte* task_scratch, size_t stride, F&& body) {
  parallel_for(tasks, [&](int64_t task) {
    dnnl::stream& s = this_thread_stream();
    memory scratchpad = wrap(p.scratchpad, task_scratch + size_t(task) * stride);
    body(task, s, scratchpad);
    s.wait();
  });
}

}  // namespace

bool onednn_conv_fwd(const ConvGeom& g, const float* x, const float* w, const float* bias, float* y) {
  if (!onednn_on()) return false;
  const int64_t images = piece_images(g);
  const Prim& p = prim(Kind::kForward, g, images, bias != nullptr);
  if (!p.usable) return false;
  const int64_t tasks = g.n / images;
  const DataScratch scratch = data_scratch(p, tasks, call_scratch(data_scratch(p, tasks, nullptr).bytes));
  const void* filters = filters_for(p, w, scratch);
  const Descs d = descs(g, images);
  const int64_t x_piece = images * g.h * g.w * g.c, y_piece = images * g.ho * g.wo * g.k;
  for_each_task(tasks, p, scratch.tasks, scratch.task_stride, [&](int64_t piece, dnnl::stream& s, memory& scratchpad) {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(d.src, x + piece * x_piece)},
                                         {DNNL_ARG_WEIGHTS, wrap(p.weights, filters)},
                                         {DNNL_ARG_DST, wrap(d.dst, y + piece * y_piece)},
                                         {DNNL_ARG_SCRATCHPAD, scratchpad}};
    if (bias) args.emplace(DNNL_ARG_BIAS, wrap(d.bias, bias));
    p.primitive.execute(s, args);
  });
  return true;
}

bool onednn_conv_dgrad(const ConvGeom& g, const float* dy, const float* w, float* dx) {
  if (!onednn_on()) return false;
  const int64_t images = piece_images(g);
  const Prim& p = prim(Kind::kDgrad, g, images, false);
  if (!p.usable) return false;
  const int64_t tasks = g.n / images;
  const DataScratch scratch = data_scratch(p, tasks, call_scratch(data_scratch(p, tasks, nullptr).bytes));
  const void* filters = filters_for(p, w, scratch);
  const Descs d = descs(g, images);
  const int64_t x_piece = images * g.h * g.w * g.c, y_piece = images * g.ho * g.wo * g.k;
  for_each_task(tasks, p, scratch.tasks, scratch.task_stride, [&](int64_t piece, dnnl::stream& s, memory& scratchpad) {
    p.primitive.execute(s, {{DNNL_ARG_DIFF_DST, wrap(d.dst, dy + piece * y_piece)},
                            {DNNL_ARG_WEIGHTS, wrap(p.weights, filters)},
                            {DNNL_ARG_DIFF_SRC, wrap(d.src, dx + piece * x_piece)},
                            {DNNL_ARG_SCRATCHPAD, scratchpad}});
  });
  return true;
}

// Depthwise weight gradients of windows larger than 3x3 are left to kiln's own loops
// (conv_depthwise_cpu.h), which sum every tap of a block of channels over a range of images in one
// pass. Measured layer by layer at batch 32 on 2 threads (docs/results.md, 2026-12-07): oneDNN's jit
// kernel runs 3x3 windows 2-10x faster than kiln's loops (MobileNetV2: 144 ms in all against 430),
// while its 5x5 ones take 2x longer in all (EfficientNet-B0's nine: 422 ms against 209), up to 8x on
// 7x7 maps of 1152 channels, where its time follows the channels rather than the work.
bool kiln_runs_wgrad(const ConvGeom& g) { return g.depthwise() && g.r * g.s > 9; }

bool onednn_conv_wgrad(const ConvGeom& g, const float* dy, const float* x, float* dw, float* dbias) {
  if (!onednn_on() || kiln_runs_wgrad(g)) return false;
  const WgradCut cut = wgrad_cut(g);
  const int64_t images = cut.images, pieces = cut.pieces, slices = cut.slices;
  const ConvGeom& slice_geom = cut.slice_geom;
  const int64_t ks = slice_geom.k;
  const Prim& p = prim(Kind::kWgrad, slice_geom, images, dbias != nullptr);
  if (!p.usable) return false;
  const Descs d = descs(slice_geom, images);
  const int64_t x_piece = images * g.h * g.w * g.c, dy_rows = images * g.ho * g.wo;
  const int64_t slice_len = int64_t(p.weights.get_size() / sizeof(float)), piece_len = slices * slice_len;
  const bool bias = dbias != nullptr;
  const WgradScratch scratch =
      wgrad_scratch(p, g, cut, bias, call_scratch(wgrad_scratch(p, g, cut, bias, nullptr).bytes));
  float* partial = scratch.partial;
  float* partial_bias = scratch.partial_bias;
  for_each_task(
      pieces * slices, p, scratch.tasks, scratch.task_stride, [&](int64_t task, dnnl::stream& s, memory& scratchpad) {
        const int64_t piece = task / slices, slice = task % slices;
        const float* dy_piece = dy + piece * dy_rows * g.k;
        const float* dy_slice = dy_piece;
        if (slices > 1) {  // the slice's channels of each dy row, made dense for the primitive
          float* dense =
              reinterpret_cast<float*>(scratch.tasks + size_t(task) * scratch.task_stride + scratch.scratchpad_bytes);
          for (int64_t row = 0; row < dy_rows; ++row)
            std::memcpy(dense + row * ks, dy_piece + row * g.k + slice * ks, size_t(ks) * sizeof(float));
          dy_slice = dense;
        }
        std::unordered_map<int, memory> args{
            {DNNL_ARG_SRC, wrap(d.src, x + piece * x_piece)},
            {DNNL_ARG_DIFF_DST, wrap(d.dst, dy_slice)},
            {DNNL_ARG_DIFF_WEIGHTS, wrap(p.weights, partial + piece * piece_len + slice * slice_len)},
            {DNNL_ARG_SCRATCHPAD, scratchpad}};
        if (dbias) args.emplace(DNNL_ARG_DIFF_BIAS, wrap(d.bias, partial_bias + piece * g.k + slice * ks));
        p.primitive.execute(s, args);
      });
  // The pieces' sums in piece order, into the first piece's.
  auto sum_pieces = [pieces](float* parts, int64_t len) {
    parallel_blocks(len, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t piece = 1; piece < pieces; ++piece)
        for (int64_t i = begin; i < end; ++i) parts[i] += parts[piece * len + i];
    });
  };
  sum_pieces(partial, piece_len);
  // Each slice's filters are KRSC rows [slice * ks, (slice + 1) * ks) of dw.
  const int64_t slice_krsc = ks * g.r * g.s * g.cg;
  if (p.reordered) {
    parallel_for(slices, [&](int64_t slice) {
      copy_filters(p, false, partial + slice * slice_len, dw + slice * slice_krsc);
    });
  } else {
    for (int64_t slice = 0; slice < slices; ++slice)
      std::memcpy(dw + slice * slice_krsc, partial + slice * slice_len, size_t(slice_krsc) * sizeof(float));
  }
  if (dbias) {
    sum_pieces(partial_bias, g.k);
    std::memcpy(dbias, partial_bias, size_t(g.k) * sizeof(float));
  }
  return true;
}

size_t onednn_conv_prepare(const ConvGeom& g, bool bias, ConvPasses passes) {
  if (!onednn_on()) return 0;
  size_t bytes = 0;
  const int64_t images = piece_images(g), tasks = g.n / images;
  auto take = [&](const Prim& p, size_t need) { bytes = std::max(bytes, p.usable ? need : 0); };
  if (passes.forward) {
    const Prim& p = prim(Kind::kForward, g, images, bias);
    take(p, data_scratch(p, tasks, nullptr).bytes);
  }
  if (passes.dgrad) {
    const Prim& p = prim(Kind::kDgrad, g, images, false);
    take(p, data_scratch(p, tasks, nullptr).bytes);
  }
  if (passes.wgrad && !kiln_runs_wgrad(g)) {
    const WgradCut cut = wgrad_cut(g);
    const Prim& p = prim(Kind::kWgrad, cut.slice_geom, cut.images, bias);
    take(p, wgrad_scratch(p, g, cut, bias, nullptr).bytes);
  }
  return bytes;
}

int64_t onednn_primitives_made() { return primitives_made.load(std::memory_order_relaxed); }
int64_t onednn_scratch_fallbacks() { return scratch_fallbacks.load(std::memory_order_relaxed); }

#else  // no oneDNN in this build: conv_cpu.h's own kernels run every problem

bool onednn_conv_fwd(const ConvGeom&, const float*, const float*, const float*, float*) { return false; }
bool onednn_conv_dgrad(const ConvGeom&, const float*, const float*, float*) { return false; }
bool onednn_conv_wgrad(const ConvGeom&, const float*, const float*, float*, float*) { return false; }
size_t onednn_conv_prepare(const ConvGeom&, bool, ConvPasses) { return 0; }
int64_t onednn_primitives_made() { return 0; }
int64_t onednn_scratch_fallbacks() { return 0; }

#endif

}  // namespace kiln::cpu
