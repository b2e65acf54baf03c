// SOFTMAX_CE, COUNT_CORRECT (top-1 and top-5) and ACCUMULATE_TOTALS on the GPU, run through the
// CUDA registry as an executable runs them (prepared, then on the backend's main stream), against
// the CPU kernels (loss_cpu.h) on the same logits: fp32, fp16 and bf16, 10 and 1000 classes,
// batches of 64 and 256, label smoothing 0 and 0.1; the counts also with 3 and 1031 classes and
// batches of 1024, on logits full of ties.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/loss/loss_contract.h"
#include "ops/loss/loss_cpu.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"
#include "support/gpu_test_util.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

using namespace gpu_test;
using Labels = std::vector<int32_t>;

const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};
const int64_t kClasses[] = {10, 1000};
const int64_t kBatches[] = {64, 256};

// The loss ops of layer 2, "head.loss", on the GPU: each run prepares the op (SOFTMAX_CE asks
// for its row scratch), runs it and waits, so kernel faults surface at the call.
struct GpuLossOps {
  cuda::CudaBackend backend{0};
  testing::OpBench bench{2, "head.loss"};
  GpuLossOps() { register_cuda_ops(); }

  void run(const Op& op, std::vector<TensorArg> in, std::vector<TensorArg> out) {
    const OpCall call{op, bench.program, std::move(in), std::move(out), bench.scalars, &backend};
    if (PrepareFn prepare = find_prepare(Device::CUDA, op.kind)) prepare(call);
    backend.finish_prepare();
    find_op(Device::CUDA, op.kind)(call);
    sync();
  }
};

struct DeviceLabels {
  size_t n;
  DeviceBuffer buf;
  explicit DeviceLabels(const Labels& labels) : n(labels.size()), buf(labels.size() * sizeof(int32_t)) {
    buf.upload(labels.data(), buf.bytes());
  }
  int32_t* ptr() const { return buf.as<int32_t>(); }
};

// Logits rounded to `dtype`, so the CPU reference sees exactly what the GPU reads: N(0, 3) per
// class around a per-row offset in [-5, 5]; row 1 sits near +100, where exp overflows fp32
// unless the row maximum is subtracted first.
std::vector<double> random_logits(DType dtype, int64_t n, int64_t classes, std::mt19937& rng) {
  std::uniform_real_distribution<double> offset(-5.0, 5.0);
  std::normal_distribution<double> spread(0.0, 3.0);
  std::vector<double> z(size_t(n * classes));
  for (int64_t row = 0; row < n; ++row) {
    const double base = row == 1 ? 100.0 : offset(rng);
    for (int64_t c = 0; c < classes; ++c)
      z[size_t(row * classes + c)] = testing::round_to(dtype, float(base + spread(rng)));
  }
  return z;
}

Labels random_labels(int64_t n, int64_t classes, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> cls(0, int32_t(classes - 1));
  Labels labels(static_cast<size_t>(n));
  for (int32_t& l : labels) l = cls(rng);
  return labels;
}

// The first largest logit's class: the label of a row that a trained model gets right.
int64_t first_largest(const double* z, int64_t classes) {
  int64_t best = 0;
  for (int64_t c = 1; c < classes; ++c)
    if (z[c] > z[best]) best = c;
  return best;
}

// --- Comparisons (each reports one failure, so the mutation checks can expect exactly one) ---

// The loss is fp32 in every dtype and the reference runs in float64 on the same rounded logits,
// so only the GPU's fp32 arithmetic separates them: row sums of up to 1000 exp terms (a few ulp,
// ~1e-6 relative) and the mean of 256 row losses. 1e-5 relative leaves a factor of ~10.
void expect_loss_matches(const std::string& what, float got, double want) {
  EXPECT_LE(std::abs(double(got) - want), 1e-5 * std::abs(want))
      << what << ": loss " << got << " vs the CPU's " << want;
}

// How far n * dlogits (softmax - target, within [-1, 1]) may be from the CPU's float64 value:
// the fp32 arithmetic costs up to a few 1e-6 of the softmax value (exp of an argument carrying
// log_sum's rounding), allowed as 1e-5 absolutely; storing in the dtype costs half an ulp,
// 2^-24 (fp32), 2^-11 (fp16) or 2^-8 (bf16) of the value; and fp16 stores values below 2^-14 as
// subnormals, spaced 2^-24 apart, so there rounding costs up to 2^-25 absolutely, n * 2^-25 in
// these units (7.6e-6 at n = 256).
struct Bound {
  double rel, abs;
};
Bound dlogits_bound(DType dtype, int64_t n) {
  switch (dtype) {
    case DType::F16: return {std::ldexp(1.0, -11), 1e-5 + double(n) * std::ldexp(1.0, -25)};
    case DType::BF16: return {std::ldexp(1.0, -8), 1e-5};
    default: return {std::ldexp(1.0, -24), 1e-5};
  }
}

void expect_dlogits_match(const std::string& what, DType dtype, const std::vector<double>& got,
                          const std::vector<double>& want, int64_t n, int64_t classes) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const Bound b = dlogits_bound(dtype, n);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i] * double(n), w = want[i] * double(n);
    if (!(std::abs(g - w) <= b.rel * std::abs(w) + b.abs) && bad++ == 0) first = i;  // NaN fails
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << want.size() << " dlogits are off, first at row "
                     << first / size_t(classes) << " class " << first % size_t(classes) << ": got " << got[first]
                     << ", the CPU's " << want[first] << " (allowed: " << b.rel << " relative + " << b.abs
                     << " absolute, times 1/" << n << ")";
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// One SOFTMAX_CE run on the GPU: the loss and the dlogits (empty when not asked for).
struct CeResult {
  float loss = 0.f;
  std::vector<double> dlogits;
};

CeResult run_softmax_ce(GpuLossOps& gpu, DType dtype, const DeviceTensor& logits, const DeviceLabels& labels,
                        int64_t n, int64_t classes, float smoothing, bool with_dlogits = true,
                        const DeviceTensor* scale = nullptr) {
  DeviceTensor loss = DeviceTensor::poisoned(DType::F32, 1);
  DeviceTensor dlogits = DeviceTensor::poisoned(dtype, size_t(n * classes));
  SoftmaxCrossEntropy<TensorId> ce{0, 1, 2, with_dlogits ? 3 : -1, smoothing, -1};
  ce.loss_scale = scale ? 4 : -1;
  const Op op = make_op(ce, 2);
  gpu.run(op,
          {gpu.bench.arg({n, classes}, logits.ptr(), dtype), gpu.bench.arg({n}, labels.ptr(), DType::I32),
           scale ? gpu.bench.arg({1}, scale->ptr(), DType::F32) : TensorArg{}},
          {gpu.bench.arg({1}, loss.ptr(), DType::F32),
           with_dlogits ? gpu.bench.arg({n, classes}, dlogits.ptr(), dtype) : TensorArg{}});
  CeResult r{float(loss.get()[0]), {}};
  if (with_dlogits) r.dlogits = dlogits.get();
  return r;
}

// One COUNT_CORRECT run: {top-1 hits, top-5 hits}.
using Counts = std::array<int32_t, kCorrectSlots>;
Counts run_count_correct(GpuLossOps& gpu, DType dtype, const DeviceTensor& logits, const DeviceLabels& labels,
                         int64_t n, int64_t classes) {
  DeviceBuffer correct(kCorrectSlots * sizeof(int32_t));
  correct.poison(0x5A);  // stale counts the op must overwrite
  const Op op = make_op(CountCorrect<TensorId>{0, 1, 2}, 2);
  gpu.run(op, {gpu.bench.arg({n, classes}, logits.ptr(), dtype), gpu.bench.arg({n}, labels.ptr(), DType::I32)},
          {gpu.bench.arg({kCorrectSlots}, correct.get(), DType::I32)});
  Counts counts{};
  std::memcpy(counts.data(), correct.download(sizeof(counts)).data(), sizeof(counts));
  return counts;
}

std::string case_name(DType dtype, int64_t n, int64_t classes, float smoothing = 0.f) {
  return std::string(name(dtype)) + " n=" + std::to_string(n) + " classes=" + std::to_string(classes) +
         " smoothing=" + std::to_string(smoothing);
}

TEST(LossGpu, SoftmaxCrossEntropyMatchesCpuAndIsDeterministic) {
  KILN_REQUIRE_GPU();
  GpuLossOps gpu;
  std::mt19937 rng(41);
  for (DType dtype : kDtypes)
    for (int64_t classes : kClasses)
      for (int64_t n : kBatches)
        for (float smoothing : {0.f, 0.1f}) {
          SCOPED_TRACE(case_name(dtype, n, classes, smoothing));
          const std::vector<double> z = random_logits(dtype, n, classes, rng);
          const Labels y = random_labels(n, classes, rng);
          const DeviceTensor logits(dtype, z);
          const DeviceLabels labels(y);
          std::vector<double> want_d(z.size());
          // The op's smoothing is a float attribute: the reference gets the same value.
          const double want = cpu::softmax_cross_entropy<double>(z.data(), y.data(), n, classes, double(smoothing),
                                                                 want_d.data());
          const CeResult got = run_softmax_ce(gpu, dtype, logits, labels, n, classes, smoothing);
          expect_loss_matches("loss", got.loss, want);
          expect_dlogits_match("dlogits", dtype, got.dlogits, want_d, n, classes);

          // Determinism: the loss is summed in a fixed order, so a second run gives the same bits.
          const CeResult again = run_softmax_ce(gpu, dtype, logits, labels, n, classes, smoothing);
          EXPECT_EQ(bits_of(again.loss), bits_of(got.loss)) << "the loss differs between two runs";
          EXPECT_EQ(again.dlogits, got.dlogits) << "dlogits differ between two runs";
          // dlogits is optional; without it the loss is the same.
          const CeResult loss_only = run_softmax_ce(gpu, dtype, logits, labels, n, classes, smoothing, false);
          EXPECT_EQ(bits_of(loss_only.loss), bits_of(got.loss)) << "the loss changes when dlogits is not written";
        }
}

// Loss scaling: with the scale in device memory the op writes dlogits * scale, scaled in fp32
// before the rounding to fp16, and the loss unscaled. Batch 256 and 1000 classes, PyTorch's scale
// 2^16: the bound is the unscaled one times the scale (a power of two, exact), and the small
// gradients that fp16 flushes to zero without the scale (below 2^-25) survive with it.
TEST(LossGpu, LossScaleMultipliesTheGradientBeforeItsRounding) {
  KILN_REQUIRE_GPU();
  GpuLossOps gpu;
  std::mt19937 rng(45);
  const DType dtype = DType::F16;
  const int64_t n = 256, classes = 1000;
  const double scale = 65536.0;
  const std::vector<double> z = random_logits(dtype, n, classes, rng);
  const Labels y = random_labels(n, classes, rng);
  const DeviceTensor logits(dtype, z), scale_tensor(DType::F32, std::vector<double>{scale});
  const DeviceLabels labels(y);
  std::vector<double> want_d(z.size());
  // No label smoothing: with it every off-label target (0.1 / 1000) keeps dlogits away from zero.
  const double want = cpu::softmax_cross_entropy<double>(z.data(), y.data(), n, classes, 0.0, want_d.data());
  const CeResult plain = run_softmax_ce(gpu, dtype, logits, labels, n, classes, 0.f);
  const CeResult scaled = run_softmax_ce(gpu, dtype, logits, labels, n, classes, 0.f, true, &scale_tensor);
  expect_loss_matches("loss", scaled.loss, want);
  std::vector<double> unscaled(scaled.dlogits.size());
  for (size_t i = 0; i < unscaled.size(); ++i) unscaled[i] = scaled.dlogits[i] / scale;
  // Scaled before rounding, the values lie 2^16 higher in fp16's range: the subnormal allowance
  // of the unscaled bound shrinks by the scale, the relative one stays.
  size_t bad = 0, rescued = 0;
  for (size_t i = 0; i < want_d.size(); ++i) {
    const double g = unscaled[i] * double(n), w = want_d[i] * double(n);
    if (!(std::abs(g - w) <= std::ldexp(1.0, -11) * std::abs(w) + 1e-5)) ++bad;
    if (plain.dlogits[i] == 0 && scaled.dlogits[i] != 0) ++rescued;
  }
  EXPECT_EQ(bad, 0u) << "scaled dlogits / scale differ from the CPU's";
  EXPECT_GT(rescued, 0u) << "no gradient that fp16 flushes to zero unscaled survived the scaling";
  std::printf("[loss scale] %zu of %zu fp16 dlogits are zero unscaled and nonzero scaled\n", rescued,
              want_d.size());
}

// Mutation check: the comparisons above must catch the subtlest plausible bug, label smoothing
// ignored, even at their loosest (bf16): n * dlogits then moves by 0.1 / 1000 = 1e-4 per class,
// above the 1.4e-5 that bf16 allows at a softmax value of about 1e-3, and the loss by 0.1 times
// the label's logit less the row's mean, about 0.1 * 9 with labels at the largest logits (as a
// trained model's; with random labels that term averages out over the batch).
TEST(LossGpu, ComparisonCatchesIgnoredSmoothing) {
  KILN_REQUIRE_GPU();
  GpuLossOps gpu;
  std::mt19937 rng(42);
  const DType dtype = DType::BF16;
  const int64_t n = 64, classes = 1000;
  const std::vector<double> z = random_logits(dtype, n, classes, rng);
  Labels y(size_t(n), 0);
  for (int64_t row = 0; row < n; ++row) y[size_t(row)] = int32_t(first_largest(z.data() + row * classes, classes));
  const DeviceTensor logits(dtype, z);
  const DeviceLabels labels(y);
  const CeResult got = run_softmax_ce(gpu, dtype, logits, labels, n, classes, 0.1f);
  std::vector<double> unsmoothed_d(z.size());
  const double unsmoothed =
      cpu::softmax_cross_entropy<double>(z.data(), y.data(), n, classes, 0.0, unsmoothed_d.data());
  EXPECT_NONFATAL_FAILURE(expect_loss_matches("loss", got.loss, unsmoothed), "loss");
  EXPECT_NONFATAL_FAILURE(expect_dlogits_match("dlogits", dtype, got.dlogits, unsmoothed_d, n, classes), "dlogits");
}

// The GPU cannot raise an error for a label outside [0, classes) without reading the labels
// back every step; the loss and that row's gradient turn NaN instead, and the trainer stops on
// a non-finite loss.
TEST(LossGpu, LabelOutOfRangeMakesTheLossNaN) {
  KILN_REQUIRE_GPU();
  GpuLossOps gpu;
  std::mt19937 rng(43);
  const int64_t n = 64, classes = 10;
  for (DType dtype : kDtypes)
    for (int32_t bad : {int32_t(classes), -1}) {
      SCOPED_TRACE(std::string(name(dtype)) + " label " + std::to_string(bad));
      const std::vector<double> z = random_logits(dtype, n, classes, rng);
      Labels y = random_labels(n, classes, rng);
      y[5] = bad;
      const CeResult got = run_softmax_ce(gpu, dtype, DeviceTensor(dtype, z), DeviceLabels(y), n, classes, 0.1f);
      EXPECT_TRUE(std::isnan(got.loss)) << got.loss;
      for (int64_t c = 0; c < classes; ++c) EXPECT_TRUE(std::isnan(got.dlogits[size_t(5 * classes + c)])) << c;
      EXPECT_FALSE(std::isnan(got.dlogits[size_t(4 * classes)]));  // other rows are untouched
    }
}

TEST(LossGpu, SoftmaxCrossEntropyErrorsNameTheOpAndTheFix) {
  KILN_REQUIRE_GPU();
  GpuLossOps gpu;
  const int64_t n = 4, classes = 3;
  std::mt19937 rng(44);
  const DeviceTensor logits(DType::F16, random_logits(DType::F16, n, classes, rng));
  const DeviceLabels labels(Labels{0, 1, 2, 0});
  DeviceTensor loss(DType::F32, 1), dlogits(DType::F16, size_t(n * classes));
  auto call = [&](float smoothing, DType loss_dtype, DType labels_dtype) {
    const Op op = make_op(SoftmaxCrossEntropy<TensorId>{0, 1, 2, 3, smoothing, -1}, 2);
    gpu.run(op,
            {gpu.bench.arg({n, classes}, logits.ptr(), DType::F16), gpu.bench.arg({n}, labels.ptr(), labels_dtype),
             TensorArg{}},
            {gpu.bench.arg({1}, loss.ptr(), loss_dtype), gpu.bench.arg({n, classes}, dlogits.ptr(), DType::F16)});
  };
  testing::expect_error([&] { call(1.5f, DType::F32, DType::I32); }, {"SOFTMAX_CE 'head.loss'", "label_smoothing 1.5"});
  testing::expect_error([&] { call(0.f, DType::F16, DType::I32); },
                        {"SOFTMAX_CE 'head.loss'", "loss tensor", "F32 [1]"});
  testing::expect_error([&] { call(0.f, DType::F32, DType::F32); }, {"SOFTMAX_CE 'head.loss'", "I32 class indices"});
}

// --- COUNT_CORRECT ---

// The row's classes by logit, largest first, NaN after every number, ties by class: the label's
// position is its rank (loss_contract.h).
std::vector<int64_t> sorted_classes(const double* z, int64_t classes) {
  std::vector<int64_t> order;
  for (int64_t c = 0; c < classes; ++c) order.push_back(c);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const bool a_nan = std::isnan(z[a]), b_nan = std::isnan(z[b]);
    return a_nan != b_nan ? b_nan : !a_nan && z[a] > z[b];
  });
  return order;
}

// Random logits (random_logits) reshaped into rows of every kind the rank has to get right,
// cycling by row. A third of the rows hold only multiples of 0.5 in [-4, 4] (exact in every
// dtype; ties everywhere); on top of that: padding (-1) and out-of-range labels; labels at each
// sorted position 0 to 7 (either side of the top-1 and top-5 boundaries); six classes tied at a
// new largest value, labelled with the first, fifth or sixth of them (ranks 0, 4, 5); rows of one
// repeated value; NaN logits (below every number, equal to NaN), at class 0, at the label, or a
// whole row of them.
Labels shape_rows(DType dtype, std::vector<double>& z, int64_t n, int64_t classes, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> cls(0, classes - 1);
  std::uniform_int_distribution<int> pick(0, 1 << 20);
  Labels labels = random_labels(n, classes, rng);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto at_position = [&](const double* r, int64_t position) {
    return int32_t(sorted_classes(r, classes)[size_t(std::min(position, classes - 1))]);
  };
  for (int64_t row = 0; row < n; ++row) {
    double* r = z.data() + row * classes;
    if (row % 3 == 0)
      for (int64_t c = 0; c < classes; ++c) r[c] = std::clamp(std::round(2.0 * r[c]) / 2.0, -4.0, 4.0);
    int32_t& l = labels[size_t(row)];
    const int kind = int((row / 3) % 14);  // independent of the row's tie pattern
    switch (kind) {
      case 0: l = -1; break;
      case 1: l = int32_t(classes) + pick(rng) % 3; break;
      case 2: case 3: case 4: case 5: case 6: case 7: case 8: case 9: l = at_position(r, kind - 2); break;
      case 10: {
        if (classes < 6) break;  // a random label
        const double top = testing::round_to(dtype, float(r[sorted_classes(r, classes)[0]] + 1.0));
        std::vector<int64_t> tied;
        while (tied.size() < 6) {
          const int64_t c = cls(rng);
          if (std::find(tied.begin(), tied.end(), c) == tied.end()) tied.push_back(c);
        }
        for (int64_t c : tied) r[c] = top;
        std::sort(tied.begin(), tied.end());
        const int which[] = {0, 4, 5};
        l = int32_t(tied[size_t(which[pick(rng) % 3])]);
        break;
      }
      case 11: std::fill(r, r + classes, 0.75), l = int32_t(std::min<int64_t>(classes - 1, pick(rng) % 7)); break;
      case 12:  // NaN at class 0 and elsewhere; the label near the top, or at a NaN
        r[0] = nan, r[cls(rng)] = nan, r[classes / 2] = nan;
        l = pick(rng) % 3 == 0 ? int32_t(classes / 2) : at_position(r, pick(rng) % 7);
        break;
      case 13:  // a row of NaN: ranks by class alone
        std::fill(r, r + classes, nan), l = int32_t(std::min<int64_t>(classes - 1, pick(rng) % 7));
        break;
      default: break;
    }
  }
  return labels;
}

// Wrong rules the comparison must tell from the right one: ties ignored (only larger logits
// outrank the label), and NaN compared as IEEE does (a NaN label is outranked by nothing).
enum class Mutant { IgnoreTies, IeeeNaN };
cpu::TopHits mutant_hits(Mutant m, const std::vector<double>& z, const Labels& y, int64_t classes) {
  cpu::TopHits h;
  for (size_t row = 0; row < y.size(); ++row) {
    const int32_t l = y[row];
    if (l < 0 || l >= classes) continue;
    const double* r = z.data() + int64_t(row) * classes;
    int64_t rank = 0;
    for (int64_t c = 0; c < classes; ++c) {
      if (m == Mutant::IgnoreTies) {
        const bool l_nan = std::isnan(r[l]), c_nan = std::isnan(r[c]);
        rank += l_nan ? !c_nan : !c_nan && r[c] > r[l];
      } else {
        rank += r[c] > r[l] || (c < l && r[c] == r[l]);
      }
    }
    h.top1 += rank < 1, h.top5 += rank < 5;
  }
  return h;
}

TEST(LossGpu, CountCorrectTop1AndTop5MatchCpuWithTiesPaddingAndNaN) {
  KILN_REQUIRE_GPU();
  GpuLossOps gpu;
  std::mt19937 rng(45);
  for (DType dtype : kDtypes)
    for (int64_t classes : {int64_t(3), int64_t(10), int64_t(1000), int64_t(1031)})
      for (int64_t n : {int64_t(64), int64_t(256), int64_t(1024)}) {
        SCOPED_TRACE(case_name(dtype, n, classes));
        std::vector<double> z = random_logits(dtype, n, classes, rng);
        const Labels y = shape_rows(dtype, z, n, classes, rng);
        const std::vector<float> zf(z.begin(), z.end());  // exact: every value is a dtype value
        const cpu::TopHits want = cpu::count_correct<float>(zf.data(), y.data(), n, classes);
        int64_t valid = 0;
        for (int32_t l : y) valid += l >= 0 && l < classes;
        if (classes < 5) {
          ASSERT_EQ(want.top5, valid) << "fewer than 5 classes: every counted row is a top-5 hit";
        } else {
          ASSERT_GT(want.top1, 0) << "some rows should hit";
          ASSERT_GT(want.top5, want.top1) << "top-5 should hit more often";
          ASSERT_LT(want.top5, valid) << "and some rows miss both";
        }
        const DeviceTensor logits(dtype, z);
        const DeviceLabels labels(y);
        const Counts got = run_count_correct(gpu, dtype, logits, labels, n, classes);
        EXPECT_EQ(got[kTop1Hits], want.top1) << "top-1";
        EXPECT_EQ(got[kTop5Hits], want.top5) << "top-5";
        // Integer counts: a second run gives the same.
        EXPECT_EQ(run_count_correct(gpu, dtype, logits, labels, n, classes), got) << "the counts differ between runs";

        // Mutation checks: the rows tell the right rule from the wrong ones, so the comparison
        // above would catch a kernel that ignored ties or compared NaN as IEEE does.
        if (classes >= 10) {
          for (Mutant m : {Mutant::IgnoreTies, Mutant::IeeeNaN}) {
            const cpu::TopHits wrong = mutant_hits(m, z, y, classes);
            EXPECT_TRUE(wrong.top1 != got[kTop1Hits] || wrong.top5 != got[kTop5Hits])
                << "the rows do not tell the rule from mutant " << int(m);
          }
        }
      }
}

TEST(LossGpu, CountCorrectErrorsNameTheOp) {
  KILN_REQUIRE_GPU();
  GpuLossOps gpu;
  const DeviceTensor logits(DType::F32, std::vector<double>{1, 3, 3, 5, 0, 0});
  const DeviceLabels labels(Labels{1, 0});
  DeviceBuffer out(kCorrectSlots * sizeof(int32_t));
  const Op op = make_op(CountCorrect<TensorId>{0, 1, 2}, 2);
  testing::expect_error(
      [&] {
        gpu.run(op, {gpu.bench.arg({2, 3}, logits.ptr(), DType::F32), gpu.bench.arg({2}, labels.ptr(), DType::I32)},
                {gpu.bench.arg({2}, out.get(), DType::F32)});
      },
      {"COUNT_CORRECT 'head.loss'", "correct tensor", "I32 [2]"});
  // An old program's single count is refused, not overrun.
  testing::expect_error(
      [&] {
        gpu.run(op, {gpu.bench.arg({2, 3}, logits.ptr(), DType::F32), gpu.bench.arg({2}, labels.ptr(), DType::I32)},
                {gpu.bench.arg({1}, out.get(), DType::I32)});
      },
      {"COUNT_CORRECT 'head.loss'", "correct tensor", "I32 [1]", "I32 [2]"});
  testing::expect_error(
      [&] {
        gpu.run(op, {gpu.bench.arg({6}, logits.ptr(), DType::F32), gpu.bench.arg({2}, labels.ptr(), DType::I32)},
                {gpu.bench.arg({2}, out.get(), DType::I32)});
      },
      {"COUNT_CORRECT 'head.loss'", "(N, classes)"});
}

}  // namespace
// ACCUMULATE_TOTALS on the GPU against the shared rule run on the host: the same doubles
// (sums of the same fp32 losses in the same order), the step read from the device scalars, the
// top-1 and top-5 hits in their slots.
TEST(LossGpu, AccumulateTotalsMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  GpuLossOps gpu;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> losses = {2.5f, 1.1f, inf, nan, 0.3f};
  const std::vector<std::array<int32_t, kCorrectSlots>> hits = {{7, 19}, {3, 8}, {1, 1}, {2, 30}, {4, 5}};
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "evaluation");
    std::vector<double> want(kTotalsSlots, 0.0);
    want[kFirstBadStep] = -1;
    DeviceBuffer totals(want.size() * sizeof(double));
    totals.upload(want.data(), totals.bytes());
    DeviceBuffer loss(sizeof(float)), correct(kCorrectSlots * sizeof(int32_t));
    const Op op = make_op(AccumulateTotals<TensorId>{training ? 0 : -1, 1, 2}, 2);
    for (size_t i = 0; i < losses.size(); ++i) {
      const int64_t step = 20 + int64_t(i);
      loss.upload(&losses[i], sizeof(float));
      correct.upload(hits[i].data(), kCorrectSlots * sizeof(int32_t));
      gpu.bench.scalars.step = step;
      gpu.backend.stage_scalars(gpu.bench.scalars);
      const OpCall call{op,
                        gpu.bench.program,
                        {training ? gpu.bench.arg({1}, loss.get(), DType::F32) : TensorArg{},
                         gpu.bench.arg({kCorrectSlots}, correct.get(), DType::I32)},
                        {gpu.bench.arg({kTotalsSlots}, totals.get(), DType::F64)},
                        gpu.bench.scalars,
                        &gpu.backend,
                        gpu.backend.device_scalars()};
      find_op(Device::CUDA, op.kind)(call);
      sync();
      const double l = losses[i];
      add_run_to_totals(want.data(), training ? &l : nullptr, hits[i][kTop1Hits], hits[i][kTop5Hits], step);
    }
    std::vector<double> got(want.size());
    const std::vector<uint8_t> bytes = totals.download(totals.bytes());
    std::memcpy(got.data(), bytes.data(), bytes.size());
    ASSERT_EQ(got.size(), want.size());
    for (size_t s = 0; s < want.size(); ++s) {
      SCOPED_TRACE("slot " + std::to_string(s));
      if (std::isnan(want[s]))
        EXPECT_TRUE(std::isnan(got[s]));
      else
        EXPECT_EQ(got[s], want[s]);
    }
    EXPECT_EQ(got[kHitsSum], 17);
    EXPECT_EQ(got[kTop5HitsSum], 63);
    EXPECT_EQ(got[kStepsCounted], 5);
    EXPECT_EQ(got[kFirstBadStep], training ? 22 : -1);  // the inf of the third run
  }
}

}  // namespace kiln
