#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/loss/loss_contract.h"
#include "ops/loss/loss_cpu.h"
#include "runtime/op_call.h"
#include "support/cpu_test_util.h"
#include "support/gradcheck.h"
#include "support/op_bench.h"

namespace {

using namespace kiln;
using namespace kiln::cpu;
using kiln::testing::expect_gradient_matches;
using kiln::testing::GradError;
using kiln::testing::numeric_gradient;
using kiln::testing::rel_err;
using kiln::testing::Vec;
using Labels = std::vector<int32_t>;

struct Batch {
  int64_t N, C;
  Vec logits;
  Labels labels;
  Batch(int64_t N_, int64_t C_, uint32_t seed, double spread = 3.0) : N(N_), C(C_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> dist(-spread, spread);
    std::uniform_int_distribution<int32_t> cls(0, static_cast<int32_t>(C - 1));
    logits.resize(N * C);
    for (double& v : logits) v = dist(rng);
    for (int64_t n = 0; n < N; ++n) labels.push_back(cls(rng));
  }
};

// Textbook definition: softmax without the max shift, explicit smoothed targets.
double ref_loss(const Batch& b, double ls, Vec* grad) {
  double total = 0;
  if (grad) grad->assign(b.N * b.C, 0.0);
  for (int64_t n = 0; n < b.N; ++n) {
    double denom = 0;
    for (int64_t c = 0; c < b.C; ++c) denom += std::exp(b.logits[n * b.C + c]);
    for (int64_t c = 0; c < b.C; ++c) {
      double p = std::exp(b.logits[n * b.C + c]) / denom;
      double target = (1 - ls) * (c == b.labels[n] ? 1.0 : 0.0) + ls / b.C;
      total -= target * std::log(p);
      if (grad) (*grad)[n * b.C + c] = (p - target) / b.N;
    }
  }
  return total / b.N;
}

TEST(LossCpu, MatchesReferenceWithoutAndWithSmoothing) {
  for (double ls : {0.0, 0.1, 1.0}) {
    Batch b(16, 10, 1);
    Vec d(b.N * b.C), ref_d;
    double loss =
        softmax_cross_entropy<double>(b.logits.data(), b.labels.data(), b.N, b.C, ls, d.data());
    double ref = ref_loss(b, ls, &ref_d);
    EXPECT_NEAR(loss, ref, 1e-13 * ref) << "smoothing " << ls;
    EXPECT_LT(rel_err(d, ref_d), 1e-12) << "smoothing " << ls;
    std::vector<float> lf(b.logits.begin(), b.logits.end()), df(d.size());
    double loss_f = softmax_cross_entropy<float>(lf.data(), b.labels.data(), b.N, b.C, ls,
                                                 df.data());
    EXPECT_NEAR(loss_f, ref, 1e-6 * ref);
    EXPECT_LT(rel_err(Vec(df.begin(), df.end()), ref_d), 1e-5);
  }
}

TEST(LossCpu, SmoothingKnownValue) {
  // Two classes, equal logits: softmax = 1/2, so the loss is log 2 whatever the smoothing,
  // and the gradient is (1/2 - target): target = 0.9 + 0.05 for the label.
  Vec logits = {0.0, 0.0}, d(2);
  Labels labels = {1};
  double loss = softmax_cross_entropy<double>(logits.data(), labels.data(), 1, 2, 0.1, d.data());
  EXPECT_DOUBLE_EQ(loss, std::log(2.0));
  EXPECT_NEAR(d[0], 0.5 - 0.05, 1e-15);
  EXPECT_NEAR(d[1], 0.5 - 0.95, 1e-15);
}

TEST(LossCpu, GradientMatchesFiniteDifferences) {
  for (double ls : {0.0, 0.2}) {
    Batch b(6, 5, 2);
    Vec d(b.N * b.C);
    softmax_cross_entropy<double>(b.logits.data(), b.labels.data(), b.N, b.C, ls, d.data());
    const Vec fd = numeric_gradient(
        [&](const Vec& z) {
          return softmax_cross_entropy<double>(z.data(), b.labels.data(), b.N, b.C, ls, nullptr);
        },
        b.logits, 1e-6);
    expect_gradient_matches(d, fd, 1e-6, GradError::Relative, "smoothing " + std::to_string(ls));
  }
}

TEST(LossCpu, LargeLogitsStayFinite) {
  Batch b(4, 7, 3);
  Vec shifted = b.logits, d1(b.logits.size()), d2(b.logits.size());
  for (double& v : shifted) v += 1000.0;  // exp(1000) overflows without the max shift
  double l1 = softmax_cross_entropy<double>(b.logits.data(), b.labels.data(), b.N, b.C, 0.1,
                                            d1.data());
  double l2 =
      softmax_cross_entropy<double>(shifted.data(), b.labels.data(), b.N, b.C, 0.1, d2.data());
  EXPECT_TRUE(std::isfinite(l2));
  EXPECT_NEAR(l1, l2, 1e-10);
  EXPECT_LT(rel_err(d2, d1), 1e-10);
}

TEST(LossCpu, LargeBatchIsDeterministicAndMatches) {  // takes the multi-threaded path
  Batch b(1024, 100, 4);
  Vec d1(b.N * b.C), d2(b.N * b.C), ref_d;
  double l1 = softmax_cross_entropy<double>(b.logits.data(), b.labels.data(), b.N, b.C, 0.1,
                                            d1.data());
  double l2 = softmax_cross_entropy<double>(b.logits.data(), b.labels.data(), b.N, b.C, 0.1,
                                            d2.data());
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(d1, d2);
  double ref = ref_loss(b, 0.1, &ref_d);
  EXPECT_NEAR(l1, ref, 1e-12 * ref);
  EXPECT_LT(rel_err(d1, ref_d), 1e-12);
}

// --- COUNT_CORRECT: top-1 and top-5 ---

// The reference order, by sorting: the row's classes by logit, largest first, NaN after every
// number, ties (NaN with NaN too) by class. The label's rank is its position.
template <class T>
std::vector<int64_t> sorted_classes(const T* z, int64_t C) {
  std::vector<int64_t> order;
  for (int64_t c = 0; c < C; ++c) order.push_back(c);
  // Key: (NaN?, -value), NaN's value ignored; stable_sort keeps equal keys in class order.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const bool a_nan = std::isnan(z[a]), b_nan = std::isnan(z[b]);
    if (a_nan != b_nan) return b_nan;
    return !a_nan && z[a] > z[b];
  });
  return order;
}

template <class T>
int64_t sorted_rank(const T* z, int64_t C, int64_t label) {
  const std::vector<int64_t> order = sorted_classes(z, C);
  return std::find(order.begin(), order.end(), label) - order.begin();
}

template <class T>
TopHits reference_hits(const std::vector<T>& z, const Labels& labels, int64_t C) {
  TopHits h;
  for (size_t n = 0; n < labels.size(); ++n) {
    if (labels[n] < 0 || labels[n] >= C) continue;
    const int64_t rank = sorted_rank(z.data() + int64_t(n) * C, C, labels[n]);
    h.top1 += rank < 1;
    h.top5 += rank < 5;
  }
  return h;
}

// Random rows full of ties: logits drawn from a few levels (some rows continuous, some with NaN,
// some all equal), labels mostly near the top of their row (so top-1 and top-5 both hit and
// miss), plus padding (-1) and out-of-range labels.
struct TieBatch {
  int64_t N, C;
  Vec logits;
  Labels labels;
  TieBatch(int64_t N_, int64_t C_, uint32_t seed) : N(N_), C(C_), logits(size_t(N_ * C_)), labels(size_t(N_)) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> kind(0, 9), level(0, 5), pick(0, int(C - 1));
    std::uniform_real_distribution<double> cont(-3.0, 3.0);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (int64_t n = 0; n < N; ++n) {
      double* z = logits.data() + n * C;
      const int k = kind(rng);
      for (int64_t c = 0; c < C; ++c) z[c] = k == 0 ? cont(rng) : k == 1 ? 0.5 : 0.25 * level(rng);
      if (k == 2)  // NaN at a few classes, class 0 sometimes among them
        for (int i = 0; i < 3; ++i) z[pick(rng)] = nan;
      if (k == 3) z[0] = nan;
      int32_t& label = labels[size_t(n)];
      const int which = kind(rng);
      if (which == 0) {
        label = -1;
      } else if (which == 1) {
        label = int32_t(C) + (kind(rng) % 2) * 7;  // just out of range, or further
      } else if (which <= 3) {
        label = int32_t(pick(rng));  // anywhere
      } else {  // a class among the largest, so ranks around 1 and 5 are common
        const std::vector<int64_t> order = sorted_classes(z, C);
        label = int32_t(order[size_t(std::min<int64_t>(C - 1, kind(rng) % 8))]);
      }
    }
  }
};

TEST(LossCpu, CountCorrectRanksWithTiesHandPicked) {
  // Ranks: label's logit 3 at class 6, the 3s before it at classes 1, 2, 4 -> rank 3 (top-5 only);
  // class 3 (2): four 3s above -> rank 4 (top-5); class 0 (1): five above -> rank 5 (neither);
  // class 1: the first 3 -> rank 0 (both).
  const std::vector<float> row = {1, 3, 3, 2, 3, 0, 3};
  EXPECT_EQ(label_rank<float>(row.data(), 7, 6), 3);
  EXPECT_EQ(label_rank<float>(row.data(), 7, 3), 4);
  EXPECT_EQ(label_rank<float>(row.data(), 7, 0), 5);
  EXPECT_EQ(label_rank<float>(row.data(), 7, 5), 6);
  EXPECT_EQ(label_rank<float>(row.data(), 7, 1), 0);
  std::vector<float> logits;
  for (int i = 0; i < 5; ++i) logits.insert(logits.end(), row.begin(), row.end());
  Labels labels = {6, 3, 0, 1, -1};
  TopHits h = count_correct<float>(logits.data(), labels.data(), 5, 7);
  EXPECT_EQ(h.top1, 1);
  EXPECT_EQ(h.top5, 3);
  // NaN orders below every number and ties with NaN: a NaN label ranks after the 5 numbers, and
  // after the NaN at class 0.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> with_nan = {nan, 1, nan, 4, 4, 0, 2, 9};
  EXPECT_EQ(label_rank<float>(with_nan.data(), 8, 2), 7);
  EXPECT_EQ(label_rank<float>(with_nan.data(), 8, 0), 6);
  EXPECT_EQ(label_rank<float>(with_nan.data(), 8, 7), 0);
  EXPECT_EQ(label_rank<float>(with_nan.data(), 8, 4), 2);
  const std::vector<float> all_nan(4, nan);
  EXPECT_EQ(label_rank<float>(all_nan.data(), 4, 0), 0);
  EXPECT_EQ(label_rank<float>(all_nan.data(), 4, 3), 3);
}

TEST(LossCpu, CountCorrectFirstMaxWins) {
  std::vector<float> logits = {
      1, 3, 3,   // tie between 1 and 2: class 1 wins
      5, 0, 0,   // class 0
      0, 0, 9,   // class 2
      2, 2, 2};  // all tied: class 0
  Labels labels = {1, 0, 1, 0};
  TopHits h = count_correct<float>(logits.data(), labels.data(), 4, 3);
  EXPECT_EQ(h.top1, 3);
  EXPECT_EQ(h.top5, 4);  // 3 classes: every counted row is a top-5 hit
  labels = {2, 0, 2, -1};
  h = count_correct<float>(logits.data(), labels.data(), 4, 3);
  EXPECT_EQ(h.top1, 2);
  EXPECT_EQ(h.top5, 3);  // the padding row never counts
  Vec dl(logits.begin(), logits.end());
  h = count_correct<double>(dl.data(), labels.data(), 4, 3);
  EXPECT_EQ(h.top1, 2);
  EXPECT_EQ(h.top5, 3);
}

// The kernel against the sorting reference on random rows with ties, NaN, padding and
// out-of-range labels, in both dtypes; 1 to 1000 classes; batches up to 300 rows of 100 classes
// (the multi-threaded path).
TEST(LossCpu, CountCorrectMatchesSortedRanks) {
  uint32_t seed = 100;
  for (int64_t C : {1, 2, 3, 4, 5, 6, 7, 10, 37, 100, 1000})
    for (int64_t N : {1, 9, 300}) {
      SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
      const TieBatch b(N, C, seed++);
      const TopHits want = reference_hits(b.logits, b.labels, C);
      const TopHits got = count_correct<double>(b.logits.data(), b.labels.data(), N, C);
      EXPECT_EQ(got.top1, want.top1);
      EXPECT_EQ(got.top5, want.top5);
      const std::vector<float> lf(b.logits.begin(), b.logits.end());  // exact: levels and NaN
      const TopHits want_f = reference_hits(lf, b.labels, C);
      const TopHits got_f = count_correct<float>(lf.data(), b.labels.data(), N, C);
      EXPECT_EQ(got_f.top1, want_f.top1);
      EXPECT_EQ(got_f.top5, want_f.top5);
      // Every row's rank, not only the sums.
      for (int64_t n = 0; n < N; ++n) {
        const int32_t l = b.labels[size_t(n)];
        if (l >= 0 && l < C) {
          ASSERT_EQ(label_rank<double>(b.logits.data() + n * C, C, l), sorted_rank(b.logits.data() + n * C, C, l))
              << "row " << n;
        }
      }
      int64_t valid = 0;
      for (int32_t l : b.labels) valid += l >= 0 && l < C;
      if (C < 5) {
        EXPECT_EQ(got.top5, valid) << "fewer than 5 classes: every counted row is a top-5 hit";
      }
      if (N == 300 && C >= 10) {  // the data must exercise both counts
        EXPECT_GT(got.top1, 0);
        EXPECT_GT(got.top5, got.top1);
        EXPECT_LT(got.top5, valid);
      }
    }
}

// --- Op wrapper ---

// The op tests' bench around layer 2, "head.loss".
kiln::testing::OpBench bench() { return kiln::testing::OpBench(2, "head.loss"); }

TEST(LossOp, ThroughRegistryReadsSmoothingFromItsAttribute) {
  kiln::testing::OpBench f = bench();
  Batch b(8, 4, 5);
  std::vector<float> logits(b.logits.begin(), b.logits.end()), loss(1), d(b.N * b.C);
  f.program.options.label_smoothing = 0.5f;  // not read: the op carries its own smoothing
  SoftmaxCrossEntropy<TensorId> ce{0, 1, 2, 3, 0.1f, -1};
  Op op = make_op(ce, 2);
  OpCall call{op, f.program,
              {f.arg({8, 4}, logits.data(), DType::F32), f.arg({8}, b.labels.data(), DType::I32), TensorArg{}},
              {f.arg({1}, loss.data(), DType::F32), f.arg({8, 4}, d.data(), DType::F32)},
              f.scalars};
  find_op(Device::CPU, OpKind::SOFTMAX_CE)(call);
  Vec ref_d;
  double ref = ref_loss(b, double(0.1f), &ref_d);
  EXPECT_NEAR(loss[0], ref, 1e-6 * ref);
  EXPECT_LT(rel_err(Vec(d.begin(), d.end()), ref_d), 1e-5);
  // Without dlogits (optional) only the loss is written.
  const Op loss_only = make_op(SoftmaxCrossEntropy<TensorId>{0, 1, 2, -1, 0.1f, -1}, 2);
  OpCall lcall{loss_only, f.program,
               {f.arg({8, 4}, logits.data(), DType::F32), f.arg({8}, b.labels.data(), DType::I32), TensorArg{}},
               {f.arg({1}, loss.data(), DType::F32), TensorArg{}}, f.scalars};
  loss[0] = 0;
  find_op(Device::CPU, OpKind::SOFTMAX_CE)(lcall);
  EXPECT_NEAR(loss[0], ref, 1e-6 * ref);
  ce.label_smoothing = 1.5f;
  op = make_op(ce, 2);
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::SOFTMAX_CE)(call); },
                              {"head.loss", "label_smoothing 1.5"});
}

// With loss scaling the op writes dlogits times the scale (device memory, here the CPU's) and
// leaves the loss unscaled; a scale of the wrong dtype is an error naming it.
TEST(LossOp, LossScaleMultipliesTheGradientNotTheLoss) {
  kiln::testing::OpBench f = bench();
  Batch b(8, 4, 9);
  std::vector<float> logits(b.logits.begin(), b.logits.end()), loss(1), d(b.N * b.C), scale = {1024.f};
  SoftmaxCrossEntropy<TensorId> ce{0, 1, 2, 3, 0.1f, -1};
  ce.loss_scale = 4;
  const Op op = make_op(ce, 2);
  OpCall call{op, f.program,
              {f.arg({8, 4}, logits.data(), DType::F32), f.arg({8}, b.labels.data(), DType::I32),
               f.arg({1}, scale.data(), DType::F32)},
              {f.arg({1}, loss.data(), DType::F32), f.arg({8, 4}, d.data(), DType::F32)},
              f.scalars};
  find_op(Device::CPU, OpKind::SOFTMAX_CE)(call);
  Vec ref_d;
  const double ref = ref_loss(b, double(0.1f), &ref_d);
  EXPECT_NEAR(loss[0], ref, 1e-6 * ref);
  for (double& v : ref_d) v *= 1024;
  EXPECT_LT(rel_err(Vec(d.begin(), d.end()), ref_d), 1e-5);
  std::vector<double> wide = {1024};
  OpCall bad{op, f.program,
             {f.arg({8, 4}, logits.data(), DType::F32), f.arg({8}, b.labels.data(), DType::I32),
              f.arg({1}, wide.data(), DType::F64)},
             {f.arg({1}, loss.data(), DType::F32), f.arg({8, 4}, d.data(), DType::F32)},
             f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::SOFTMAX_CE)(bad); },
                              {"head.loss", "loss scale", "F64 [1] but must be one F32"});
}

TEST(LossOp, BadLabelNamesValueIndexAndLayer) {
  kiln::testing::OpBench f = bench();
  std::vector<float> logits(3 * 10, 0.f), loss(1), d(30);
  Labels labels = {0, 9, 10};
  const Op op = make_op(SoftmaxCrossEntropy<TensorId>{0, 1, 2, 3, 0.f, -1}, 2);
  OpCall call{op, f.program,
              {f.arg({3, 10}, logits.data(), DType::F32), f.arg({3}, labels.data(), DType::I32), TensorArg{}},
              {f.arg({1}, loss.data(), DType::F32), f.arg({3, 10}, d.data(), DType::F32)},
              f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::SOFTMAX_CE)(call); },
                              {"head.loss", "label 10", "index 2"});
  labels = {0, -3, 1};
  EXPECT_THROW(find_op(Device::CPU, OpKind::SOFTMAX_CE)(call), Error);
}

// COUNT_CORRECT through the registry: I32 [2], the rows whose label is the first largest logit
// and those whose label ranks among the first 5, in both dtypes; out-of-range labels (padding
// rows) never count.
TEST(LossOp, CountCorrectThroughRegistry) {
  kiln::testing::OpBench f = bench();
  std::vector<float> logits = {
      1, 3, 3, 2, 3, 0, 3,   // ranks by class: 5 0 1 4 2 6 3
      5, 0, 0, 0, 0, 0, 0,   // 0 1 2 3 4 5 6
      0, 1, 2, 3, 4, 5, 9,   // 6 5 4 3 2 1 0
      2, 2, 2, 2, 2, 2, 2};  // 0 1 2 3 4 5 6
  Labels labels = {1, 0, 6, 0};
  std::vector<int32_t> correct = {-7, -7};
  const Op op = make_op(CountCorrect<TensorId>{0, 1, 2}, 2);
  OpCall call{op, f.program,
              {f.arg({4, 7}, logits.data(), DType::F32), f.arg({4}, labels.data(), DType::I32)},
              {f.arg({2}, correct.data(), DType::I32)}, f.scalars};
  auto count = [&] {
    correct = {-7, -7};
    find_op(Device::CPU, OpKind::COUNT_CORRECT)(call);
    return correct;
  };
  using Counts = std::vector<int32_t>;
  EXPECT_EQ(count(), (Counts{4, 4}));  // every row's first largest
  labels = {2, 4, 2, 4};
  EXPECT_EQ(count(), (Counts{0, 4}));  // ranks 1, 4, 4, 4: ties counted by class
  labels = {6, 5, 1, 5};
  EXPECT_EQ(count(), (Counts{0, 1}));  // ranks 3, 5, 5, 5
  labels = {5, 6, 0, 6};
  EXPECT_EQ(count(), (Counts{0, 0}));  // ranks 6
  labels = {1, -1, 7, 0};
  EXPECT_EQ(count(), (Counts{2, 2}));  // -1 (padding) and 7 (out of range) never count

  Vec wide(logits.begin(), logits.end());
  labels = {3, 0, 6, 4};
  OpCall wide_call{op, f.program,
                   {f.arg({4, 7}, wide.data(), DType::F64), f.arg({4}, labels.data(), DType::I32)},
                   {f.arg({2}, correct.data(), DType::I32)}, f.scalars};
  find_op(Device::CPU, OpKind::COUNT_CORRECT)(wide_call);
  EXPECT_EQ(correct, (Counts{2, 4}));

  // The counts are I32 [2] (an old program's I32 [1] is refused); the labels one I32 per row;
  // errors name the layer.
  std::vector<float> not_int(2);
  OpCall bad_count{op, f.program,
                   {f.arg({4, 7}, logits.data(), DType::F32), f.arg({4}, labels.data(), DType::I32)},
                   {f.arg({2}, not_int.data(), DType::F32)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::COUNT_CORRECT)(bad_count); },
                              {"count_correct 'head.loss'", "correct tensor", "I32 [2]"});
  OpCall one_count{op, f.program,
                   {f.arg({4, 7}, logits.data(), DType::F32), f.arg({4}, labels.data(), DType::I32)},
                   {f.arg({1}, correct.data(), DType::I32)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::COUNT_CORRECT)(one_count); },
                              {"count_correct 'head.loss'", "correct tensor", "I32 [1]", "I32 [2]"});
  OpCall bad_labels{op, f.program,
                    {f.arg({4, 7}, logits.data(), DType::F32), f.arg({3}, labels.data(), DType::I32)},
                    {f.arg({2}, correct.data(), DType::I32)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::COUNT_CORRECT)(bad_labels); },
                              {"count_correct 'head.loss'", "labels", "4 I32 class indices"});
}

}  // namespace

// ACCUMULATE_TOTALS through the registry: losses, top-1 and top-5 hits add up, runs are counted,
// and the first non-finite loss is kept with its step (later ones, finite or not, leave it alone).
TEST(LossOp, AccumulateTotalsAddsUpAndKeepsTheFirstNonFiniteStep) {
  static_assert(kLossSum == 0 && kHitsSum == 1 && kStepsCounted == 2 && kFirstBadStep == 3 && kFirstBadLoss == 4 &&
                    kTop5HitsSum == 5 && kTotalsSlots == 6,
                "the slots the tests below spell out");
  static_assert(kTop1Hits == 0 && kTop5Hits == 1 && kCorrectSlots == 2, "COUNT_CORRECT's layout");
  kiln::testing::OpBench f = bench();
  std::vector<float> loss(1);
  std::vector<int32_t> hits(2);
  std::vector<double> totals = {0, 0, 0, -1, 0, 0};
  const Op op = make_op(AccumulateTotals<TensorId>{0, 1, 2}, 2);
  OpCall call{op, f.program, {f.arg({1}, loss.data(), DType::F32), f.arg({2}, hits.data(), DType::I32)},
              {f.arg({kTotalsSlots}, totals.data(), DType::F64)}, f.scalars};
  auto run = [&](float l, int32_t top1, int32_t top5, int64_t step) {
    loss[0] = l, hits = {top1, top5}, f.scalars.step = step;
    find_op(Device::CPU, OpKind::ACCUMULATE_TOTALS)(call);
  };
  run(2.5f, 7, 20, 10);
  run(1.25f, 3, 9, 11);
  EXPECT_EQ(totals, (std::vector<double>{3.75, 10, 2, -1, 0, 29}));
  run(std::numeric_limits<float>::infinity(), 1, 2, 12);
  run(std::numeric_limits<float>::quiet_NaN(), 2, 5, 13);
  run(1.0f, 4, 4, 14);
  EXPECT_TRUE(std::isnan(totals[kLossSum]));
  EXPECT_EQ(totals[kHitsSum], 17);
  EXPECT_EQ(totals[kTop5HitsSum], 40);
  EXPECT_EQ(totals[kStepsCounted], 5);
  EXPECT_EQ(totals[kFirstBadStep], 12);  // the first, not the NaN of step 13
  EXPECT_EQ(totals[kFirstBadLoss], std::numeric_limits<double>::infinity());

  // Evaluation: no loss; only the hits and the runs add up.
  std::vector<double> eval = {0, 0, 0, -1, 0, 0};
  const Op eval_op = make_op(AccumulateTotals<TensorId>{-1, 1, 2}, 2);
  OpCall eval_call{eval_op, f.program, {TensorArg{}, f.arg({2}, hits.data(), DType::I32)},
                   {f.arg({kTotalsSlots}, eval.data(), DType::F64)}, f.scalars};
  for (int32_t h : {5, 6}) {
    hits = {h, 2 * h};
    find_op(Device::CPU, OpKind::ACCUMULATE_TOTALS)(eval_call);
  }
  EXPECT_EQ(eval, (std::vector<double>{0, 11, 2, -1, 0, 22}));

  // COUNT_CORRECT's output feeds it as compiled: random rows counted, then accumulated.
  const TieBatch b(64, 10, 7);
  const std::vector<float> lf(b.logits.begin(), b.logits.end());
  const Op count_op = make_op(CountCorrect<TensorId>{0, 1, 2}, 2);
  OpCall count_call{count_op, f.program,
                    {f.arg({64, 10}, const_cast<float*>(lf.data()), DType::F32),
                     f.arg({64}, const_cast<int32_t*>(b.labels.data()), DType::I32)},
                    {f.arg({2}, hits.data(), DType::I32)}, f.scalars};
  find_op(Device::CPU, OpKind::COUNT_CORRECT)(count_call);
  find_op(Device::CPU, OpKind::ACCUMULATE_TOTALS)(eval_call);
  const TopHits want = reference_hits(lf, b.labels, 10);
  EXPECT_EQ(eval[kHitsSum], 11 + double(want.top1));
  EXPECT_EQ(eval[kTop5HitsSum], 22 + double(want.top5));

  // Wrong tensors are errors naming the op's layer.
  std::vector<float> short_totals(kTotalsSlots);
  OpCall bad{op, f.program, {f.arg({1}, loss.data(), DType::F32), f.arg({2}, hits.data(), DType::I32)},
             {f.arg({kTotalsSlots}, short_totals.data(), DType::F32)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::ACCUMULATE_TOTALS)(bad); },
                              {"accumulate_totals 'head.loss'", "totals tensor", "F64 [6]"});
  std::vector<double> fresh = {0, 0, 0, -1, 0, 0};
  OpCall one_count{op, f.program, {f.arg({1}, loss.data(), DType::F32), f.arg({1}, hits.data(), DType::I32)},
                   {f.arg({kTotalsSlots}, fresh.data(), DType::F64)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::ACCUMULATE_TOTALS)(one_count); },
                              {"accumulate_totals 'head.loss'", "correct tensor", "I32 [2]"});
}
