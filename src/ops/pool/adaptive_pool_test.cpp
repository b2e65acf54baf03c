// Adaptive average pooling (PyTorch's AdaptiveAvgPool2d): compiled programs of the one layer in
// float64 and float32, forward, backward (d(input)) and inference, against float64 loops written
// here from the definition, for sizes that divide, that do not (7 -> 3, 13 -> 6: overlapping
// ranges), that grow (5 -> 7, 2 -> 5: repeated rows) and mixed; the three lowerings (a view of the
// input at its own size, with no op; GAP ops at 1x1; ADAPTIVE_AVGPOOL ops else); a deliberately
// wrong reference the bound rejects; the refusal of a flat input; the column order of a linear layer
// reading its flattened map; and torchvision's VGG and AlexNet with their avgpool at any input size.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "formats/torch/torch_layouts.h"
#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "ops/pool/pool_program_run_test.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::expect_error;
using testing::mixed_err;
using testing::Vec;
using pool_test::ProgramRun;
using pool_test::run;

struct Sizes {
  int64_t h, w, out_h, out_w;
};

std::string describe(const Sizes& s) { return fmt::format("{}x{} -> {}x{}", s.h, s.w, s.out_h, s.out_w); }

// Output cell i's input range along one axis, from the definition in floating point:
// [floor(i * in / out), ceil((i + 1) * in / out)). `wrong` ends it at floor((i + 1) * in / out)
// instead, ranges that never overlap (a deliberate mistake: it differs where out does not divide in).
void range(int64_t i, int64_t in, int64_t out, int64_t& lo, int64_t& hi, bool wrong = false) {
  lo = int64_t(std::floor(double(i * in) / double(out)));
  const double end = double((i + 1) * in) / double(out);
  hi = int64_t(wrong ? std::floor(end) : std::ceil(end));
  if (wrong && hi == lo) hi = lo + 1;  // keep a cell, so the mistake is in the values, not a division by 0
}

struct Reference {
  Vec y, dx;
};

// y = the mean of each output's input cells; dx adds dy / (that output's cells) to each of them.
Reference reference(const Sizes& s, int64_t n, int64_t ch, const Vec& x, const Vec& dy, bool wrong = false) {
  Reference r{Vec(size_t(n * s.out_h * s.out_w * ch), 0.0), Vec(x.size(), 0.0)};
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oh = 0; oh < s.out_h; ++oh)
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        int64_t h0, h1, w0, w1;
        range(oh, s.h, s.out_h, h0, h1, wrong);
        range(ow, s.w, s.out_w, w0, w1, wrong);
        const double cells = double((h1 - h0) * (w1 - w0));
        for (int64_t c = 0; c < ch; ++c) {
          const size_t o = size_t(((b * s.out_h + oh) * s.out_w + ow) * ch + c);
          double sum = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) {
              const size_t at = size_t(((b * s.h + ih) * s.w + iw) * ch + c);
              sum += x[at];
              r.dx[at] += dy[o] / cells;
            }
          r.y[o] = sum / cells;
        }
      }
  return r;
}

Blueprint one_pool(const Sizes& s, int channels) {
  Blueprint m("adaptive");
  m.input(int(s.h), int(s.w), channels);
  m.adaptive_avgpool(int(s.out_h), int(s.out_w), "pool");
  return m;
}

CompileOptions options(Precision precision) {
  CompileOptions o;
  o.precision = precision;
  o.batch = 2, o.loss = false, o.input_grad = true;
  return o;
}

// The ops the pooling layer of a compiled program emits, by list.
struct LayerOps {
  std::vector<OpKind> forward, backward, inference;
};

LayerOps ops_of(const Program& p, const std::string& layer) {
  LayerOps found;
  for (const auto& [list, out] : {std::pair{&p.forward, &found.forward}, std::pair{&p.backward, &found.backward},
                                  std::pair{&p.inference, &found.inference}})
    for (const Op& op : *list)
      if (op.layer >= 0 && p.layer_of(op).name == layer) out->push_back(op.kind);
  return found;
}

// float64: sums of at most 9 (more where the output is smaller: 13 -> 6 sums 9) values in [-2, 2] in
// double, a few units of 2^-53; float32: one rounding of such a double result to float, 2^-24.
constexpr double kBoundF64 = 1e-14;
constexpr double kBoundF32 = 6.0e-8;

const Sizes kSizes[] = {
    {7, 7, 3, 3},    // overlapping ranges: rows [0, 3), [2, 5), [4, 7)
    {5, 5, 7, 7},    // growing: rows repeat
    {13, 13, 6, 6},  // AlexNet's avgpool at an input of 256 (13x13 features)
    {6, 4, 3, 2},    // dividing: 2x2 windows
    {7, 5, 1, 1},    // squeeze-and-excitation's 1x1: the GAP ops
    {8, 6, 8, 3},    // the identity along one axis only
    {2, 3, 5, 7},    // VGG's 7x7 from a tiny map
    {9, 4, 4, 6},    // one axis shrinks without dividing, the other grows
};

template <class T>
void expect_program_matches_reference() {
  const double bound = sizeof(T) == 8 ? kBoundF64 : kBoundF32;
  uint32_t seed = 40;
  int wrong_checked = 0;
  for (const Sizes& s : kSizes) {
    SCOPED_TRACE(describe(s));
    const ProgramRun got = run<T>(one_pool(s, 3), seed += 2);
    ASSERT_EQ(got.y_shape, (Shape{2, s.out_h, s.out_w, 3}));
    const Reference want = reference(s, 2, 3, got.x, got.dy);
    EXPECT_LE(mixed_err(got.y, want.y), bound);
    EXPECT_LE(mixed_err(got.y_inference, want.y), bound);
    EXPECT_LE(mixed_err(got.dx, want.dx), bound);
    // Ranges that never overlap: wherever that changes the numbers, it lands far outside the bound.
    const Reference bad = reference(s, 2, 3, got.x, got.dy, /*wrong=*/true);
    if (mixed_err(bad.y, want.y) == 0) continue;
    EXPECT_GT(mixed_err(got.y, bad.y), 1e3 * bound);
    EXPECT_GT(mixed_err(got.dx, bad.dx), 1e3 * bound);
    ++wrong_checked;
  }
  EXPECT_GE(wrong_checked, 3);  // 7 -> 3, 13 -> 6, 9 -> 4 at least
}

TEST(AdaptivePoolProgram, Float64) { expect_program_matches_reference<double>(); }
TEST(AdaptivePoolProgram, Float32) { expect_program_matches_reference<float>(); }

// Which ops each size lowers to: none at the input's own size, the GAP ops at 1x1, else its own.
TEST(AdaptivePoolLayer, LowersToAViewGapOpsOrItsOwnOps) {
  const CompileOptions o = options(Precision::FP32);
  const LayerOps own = ops_of(compile(one_pool({7, 7, 3, 3}, 4), o), "pool");
  EXPECT_EQ(own.forward, std::vector<OpKind>{OpKind::ADAPTIVE_AVGPOOL_FWD});
  EXPECT_EQ(own.inference, std::vector<OpKind>{OpKind::ADAPTIVE_AVGPOOL_FWD});
  EXPECT_EQ(own.backward, std::vector<OpKind>{OpKind::ADAPTIVE_AVGPOOL_BWD});
  const Program global = compile(one_pool({7, 5, 1, 1}, 4), o);
  EXPECT_EQ(global.tensors[global.logits].shape, (Shape{2, 1, 1, 4}));  // a map, not GAP's (N, C)
  const LayerOps gap = ops_of(global, "pool");
  EXPECT_EQ(gap.forward, std::vector<OpKind>{OpKind::GAP_FWD});
  EXPECT_EQ(gap.inference, std::vector<OpKind>{OpKind::GAP_FWD});
  EXPECT_EQ(gap.backward, std::vector<OpKind>{OpKind::GAP_BWD});
  const LayerOps view = ops_of(compile(one_pool({7, 7, 7, 7}, 4), o), "pool");
  EXPECT_TRUE(view.forward.empty() && view.backward.empty() && view.inference.empty());
}

// At the input's own size the output and d(input) are views: the values are the input's and
// d(output)'s, bit for bit, and the tensors alias them.
TEST(AdaptivePoolLayer, TheIdentityIsAViewWithTheGradientPassedThrough) {
  const Sizes same{7, 7, 7, 7};
  const ProgramRun got = run<double>(one_pool(same, 3), 7);
  EXPECT_EQ(got.y, got.x);
  EXPECT_EQ(got.y_inference, got.x);
  EXPECT_EQ(got.dx, got.dy);
  const Program p = compile(one_pool(same, 3), options(Precision::FP64));
  const int y = p.find("pool");
  ASSERT_GE(y, 0);
  EXPECT_GE(p.tensors[y].alias_of, 0) << "the output owns memory";
  // Read by a linear layer after a convolution (the zoo's VGG): the program is the one without it,
  // plus two views.
  Blueprint with("m"), without("m");
  with.input(7, 7, 3).conv(4, 3, 1, 1, true, "c").adaptive_avgpool(7, 7, "avgpool").flatten("flat").fc(5, true, "fc");
  without.input(7, 7, 3).conv(4, 3, 1, 1, true, "c").flatten("flat").fc(5, true, "fc");
  CompileOptions o;
  o.batch = 2;
  const Program a = compile(with, o), b = compile(without, o);
  ASSERT_EQ(a.forward.size(), b.forward.size());
  ASSERT_EQ(a.backward.size(), b.backward.size());
  ASSERT_EQ(a.inference.size(), b.inference.size());
  for (size_t i = 0; i < a.forward.size(); ++i) EXPECT_EQ(a.forward[i].kind, b.forward[i].kind) << i;
  for (size_t i = 0; i < a.backward.size(); ++i) EXPECT_EQ(a.backward[i].kind, b.backward[i].kind) << i;
  EXPECT_EQ(a.memory.arena_bytes, b.memory.arena_bytes);
}

// A flat input is refused, naming the layer and the fix; so is an output size of 0 (its attributes).
TEST(AdaptivePoolLayer, RefusesAFlatInputAndAnEmptyOutput) {
  CompileOptions o;
  o.batch = 1;
  Blueprint flat("m");
  flat.input(4, 4, 2).flatten("flat").adaptive_avgpool(2, 2, "pool").fc(2);
  expect_error([&] { compile(flat, o); }, {"adaptive_avgpool 'pool'", "feature map", "before flatten"});
  Blueprint empty("m");
  empty.input(4, 4, 2).adaptive_avgpool(0, 2, "pool").flatten().fc(2);
  expect_error([&] { compile(empty, o); }, {"'pool'", "output size must be positive", "0x2"});
}

// A linear layer reading the flattened pooled map takes PyTorch's C,H,W columns of that map (the
// pooled size, not its input's): the layouts of load_torch_weights and the torch export.
TEST(AdaptivePoolLayer, ALinearLayerReadsThePooledMapsColumns) {
  Blueprint m("m");
  m.input(9, 8, 3).conv(5, 3, 1, 1, false, "c").adaptive_avgpool(3, 2, "pool").flatten("flat").dropout(0.5f, "drop");
  m.fc(4, true, "fc");
  CompileOptions o;
  o.batch = 1;
  const std::map<std::string, Shape> maps = torch_layout::flattened_maps(compile(m, o).graph);
  ASSERT_EQ(maps.count("fc.weight"), 1u);
  EXPECT_EQ(maps.at("fc.weight"), (Shape{3, 2, 5}));
}

// torchvision's VGG and AlexNet pool their features to 7x7 and 6x6: at 224x224 the pooling is a view
// (no op: the programs before it was added), at other sizes it runs, and the classifier's input stays
// 7 * 7 * 512 and 6 * 6 * 256 features down to VGG's 32x32 and AlexNet's 63x63.
TEST(AdaptivePoolZoo, VggAndAlexnetTakeAnyInputSize) {
  struct Model {
    const char* name;
    int64_t smallest, features, side, channels;
  };
  for (const Model& model : {Model{"vgg11", 32, 25088, 7, 512}, Model{"alexnet", 63, 9216, 6, 256}}) {
    SCOPED_TRACE(model.name);
    for (int64_t size : {int64_t{224}, model.smallest, int64_t{97}}) {
      CompileOptions o;
      o.batch = 1, o.input_hwc = {size, size, 3};
      const Program p = compile(zoo::by_name(model.name, 10), o);
      const int pool = p.find("avgpool");
      ASSERT_GE(pool, 0) << size;
      EXPECT_EQ(p.tensors[pool].shape, (Shape{1, model.side, model.side, model.channels})) << size;
      EXPECT_EQ(p.tensors[p.find("flatten")].shape, (Shape{1, model.features})) << size;
      const LayerOps ops = ops_of(p, "avgpool");
      EXPECT_EQ(ops.forward.empty(), size == 224) << size;
      EXPECT_EQ(p.tensors[pool].alias_of >= 0, size == 224) << size;
    }
    CompileOptions too_small;
    too_small.batch = 1, too_small.input_hwc = {model.smallest - 1, model.smallest - 1, 3};
    EXPECT_THROW(compile(zoo::by_name(model.name, 10), too_small), Error) << model.smallest - 1;
  }
}

}  // namespace
}  // namespace kiln
