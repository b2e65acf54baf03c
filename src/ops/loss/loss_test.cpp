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

TEST(LossCpu, CountCorrectFirstMaxWins) {
  std::vector<float> logits = {
      1, 3, 3,   // tie between 1 and 2: class 1 wins
      5, 0, 0,   // class 0
      0, 0, 9,   // class 2
      2, 2, 2};  // all tied: class 0
  Labels labels = {1, 0, 1, 0};
  EXPECT_EQ(count_correct<float>(logits.data(), labels.data(), 4, 3), 3);
  labels = {2, 0, 2, -1};
  EXPECT_EQ(count_correct<float>(logits.data(), labels.data(), 4, 3), 2);
  Vec dl(logits.begin(), logits.end());
  EXPECT_EQ(count_correct<double>(dl.data(), labels.data(), 4, 3), 2);
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

// COUNT_CORRECT through the registry: one I32 count of the rows whose first largest logit is the
// label, in both dtypes; out-of-range labels (padding rows) never count.
TEST(LossOp, CountCorrectThroughRegistry) {
  kiln::testing::OpBench f = bench();
  std::vector<float> logits = {
      1, 3, 3,   // tie between 1 and 2: class 1 wins
      5, 0, 0,   // class 0
      0, 0, 9,   // class 2
      2, 2, 2};  // all tied: class 0
  Labels labels = {1, 0, 1, 0};
  std::vector<int32_t> correct = {-7};
  const Op op = make_op(CountCorrect<TensorId>{0, 1, 2}, 2);
  OpCall call{op, f.program,
              {f.arg({4, 3}, logits.data(), DType::F32), f.arg({4}, labels.data(), DType::I32)},
              {f.arg({1}, correct.data(), DType::I32)}, f.scalars};
  auto count = [&] {
    find_op(Device::CPU, OpKind::COUNT_CORRECT)(call);
    return correct[0];
  };
  EXPECT_EQ(count(), 3);  // the tied rows count for their first largest; row 2 misses
  labels = {2, 0, 1, 1};
  EXPECT_EQ(count(), 1);  // tied rows count only for their first largest
  labels = {1, 0, 2, 0};
  EXPECT_EQ(count(), 4);  // every row right
  labels = {0, 1, 0, 2};
  EXPECT_EQ(count(), 0);  // every row wrong
  labels = {1, -1, 2, 3};
  EXPECT_EQ(count(), 2);  // -1 (padding) and 3 (out of range) never count

  Vec wide(logits.begin(), logits.end());
  labels = {1, 0, 2, 0};
  OpCall wide_call{op, f.program,
                   {f.arg({4, 3}, wide.data(), DType::F64), f.arg({4}, labels.data(), DType::I32)},
                   {f.arg({1}, correct.data(), DType::I32)}, f.scalars};
  find_op(Device::CPU, OpKind::COUNT_CORRECT)(wide_call);
  EXPECT_EQ(correct[0], 4);

  // The count is one I32; the labels one I32 per row; errors name the layer.
  std::vector<float> not_int(1);
  OpCall bad_count{op, f.program,
                   {f.arg({4, 3}, logits.data(), DType::F32), f.arg({4}, labels.data(), DType::I32)},
                   {f.arg({1}, not_int.data(), DType::F32)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::COUNT_CORRECT)(bad_count); },
                              {"count_correct 'head.loss'", "correct tensor", "I32"});
  OpCall bad_labels{op, f.program,
                    {f.arg({4, 3}, logits.data(), DType::F32), f.arg({3}, labels.data(), DType::I32)},
                    {f.arg({1}, correct.data(), DType::I32)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::COUNT_CORRECT)(bad_labels); },
                              {"count_correct 'head.loss'", "labels", "4 I32 class indices"});
}

}  // namespace

// ACCUMULATE_TOTALS through the registry: losses and hits add up, runs are counted, and the first
// non-finite loss is kept with its step (later ones, finite or not, leave it alone).
TEST(LossOp, AccumulateTotalsAddsUpAndKeepsTheFirstNonFiniteStep) {
  kiln::testing::OpBench f = bench();
  std::vector<float> loss(1);
  std::vector<int32_t> hits(1);
  std::vector<double> totals = {0, 0, 0, -1, 0};
  const Op op = make_op(AccumulateTotals<TensorId>{0, 1, 2}, 2);
  OpCall call{op, f.program, {f.arg({1}, loss.data(), DType::F32), f.arg({1}, hits.data(), DType::I32)},
              {f.arg({kTotalsSlots}, totals.data(), DType::F64)}, f.scalars};
  auto run = [&](float l, int32_t h, int64_t step) {
    loss[0] = l, hits[0] = h, f.scalars.step = step;
    find_op(Device::CPU, OpKind::ACCUMULATE_TOTALS)(call);
  };
  run(2.5f, 7, 10);
  run(1.25f, 3, 11);
  EXPECT_EQ(totals, (std::vector<double>{3.75, 10, 2, -1, 0}));
  run(std::numeric_limits<float>::infinity(), 1, 12);
  run(std::numeric_limits<float>::quiet_NaN(), 2, 13);
  run(1.0f, 4, 14);
  EXPECT_TRUE(std::isnan(totals[kLossSum]));
  EXPECT_EQ(totals[kHitsSum], 17);
  EXPECT_EQ(totals[kStepsCounted], 5);
  EXPECT_EQ(totals[kFirstBadStep], 12);  // the first, not the NaN of step 13
  EXPECT_EQ(totals[kFirstBadLoss], std::numeric_limits<double>::infinity());

  // Evaluation: no loss; only the hits and the runs add up.
  std::vector<double> eval = {0, 0, 0, -1, 0};
  const Op eval_op = make_op(AccumulateTotals<TensorId>{-1, 1, 2}, 2);
  OpCall eval_call{eval_op, f.program, {TensorArg{}, f.arg({1}, hits.data(), DType::I32)},
                   {f.arg({kTotalsSlots}, eval.data(), DType::F64)}, f.scalars};
  for (int32_t h : {5, 6}) {
    hits[0] = h;
    find_op(Device::CPU, OpKind::ACCUMULATE_TOTALS)(eval_call);
  }
  EXPECT_EQ(eval, (std::vector<double>{0, 11, 2, -1, 0}));

  // Wrong tensors are errors naming the op's layer.
  std::vector<float> short_totals(kTotalsSlots);
  OpCall bad{op, f.program, {f.arg({1}, loss.data(), DType::F32), f.arg({1}, hits.data(), DType::I32)},
             {f.arg({kTotalsSlots}, short_totals.data(), DType::F32)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::ACCUMULATE_TOTALS)(bad); },
                              {"accumulate_totals 'head.loss'", "totals tensor", "F64 [5]"});
}
