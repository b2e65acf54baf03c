// ResNet's fused block ends on the GPU against float64 references computed from the same
// (dtype-rounded) inputs, in fp32, fp16 and bf16:
//   - the kernels: bn_add_relu_apply (identity and normalized shortcut, with and without the bit
//     mask, c = 64 on the packed path, c = 12 and misaligned pointers on the narrow and flat
//     paths, y over a or b);
//   - the six ops through the CUDA op table, prepared and run as an executable runs them, the
//     block end's backward also from its gradient in two terms (against their GRAD_SUM).
//
// Tolerances. The apply computes v = a * scale_a + (b * scale_b + (shift_a + shift_b)) in fp32
// (three roundings, each at most u32 = 2^-24 times the running sum, so |v - pre| <= 3 u32 T with
// T = |a scale_a| + |b scale_b| + |shift_a| + |shift_b|) and rounds v once to the output dtype
// (at most half an ulp). Each y is checked elementwise within one ulp of the output dtype of
// the float64 value, plus slack = 8 u32 T, plus half the spacing of fp16's subnormals. Mask bits
// are compared exactly wherever |pre| > slack (only there can fp32 not flip the sign), and
// everywhere a bit must agree with y (0 bit: y exactly 0). An identity shortcut's gradient is a
// select of dy, so it is compared exactly. The backward's sums and gradients and the convolutions use the
// relative L2 bounds of the BN / CBR GPU tests (gpu_test_util.h's tolerance(): the output
// dtype's rounding dominates), the statistics of fp32 sums 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/resblock/resblock_contract.h"
#include "ops/resblock/resblock_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"
#include "support/cbr_test_reference.h"
#include "support/cpu_test_util.h"
#include "support/gpu_test_util.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

using namespace gpu_test;

const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};
constexpr double kU32 = 0x1p-24;  // fp32's unit roundoff

// The spacing of values near x relative to x, at most: 2^-23, 2^-10, 2^-7.
double one_ulp(DType dtype) {
  switch (dtype) {
    case DType::F16: return 0x1p-10;
    case DType::BF16: return 0x1p-7;
    default: return 0x1p-23;
  }
}

// Below fp16's normal range the spacing is absolute (2^-24): rounding there errs by up to half
// of it whatever the value. bf16 and fp32 reach that far down only near 1e-38.
double subnormal_floor(DType dtype) { return dtype == DType::F16 ? 0x1p-25 : 0.0; }

// Every got[i] within one ulp of the output dtype of want[i] (relative), plus slack[i] and the
// subnormal floor. NaN (a poisoned element never written) always fails.
void expect_within_ulp(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                       const std::vector<double>& slack, DType dtype) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = one_ulp(dtype) * std::abs(want[i]) + slack[i] + subnormal_floor(dtype);
    if (!(std::abs(got[i] - want[i]) <= tol) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements are further than one ulp from float64, first at " << first << ": got "
                     << got[first] << ", want " << want[first];
}

// A 0 bit must come with y exactly 0, a 1 bit with y >= 0 (fp32's v > 0 may round to 0 in fp16).
void expect_bits_agree_with_y(const std::vector<uint8_t>& bits, const std::vector<double>& y) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const bool ok = bit(bits, i) ? y[i] >= 0 : y[i] == 0;
    if (!ok && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << bad << " mask bits disagree with y, first at " << first << " (y " << y[first] << ")";
}

// --- bn_add_relu_apply's float64 reference ---

// One block end's inputs, already rounded to what the GPU holds; scale_b / shift_b are empty for
// an identity shortcut.
struct TailInputs {
  std::vector<double> a, b, scale_a, shift_a, scale_b, shift_b;
  bool normalized() const { return !scale_b.empty(); }
};

TailInputs random_tail(DType dtype, int64_t n, int64_t c, bool normalized, std::mt19937& rng) {
  TailInputs in;
  in.a = random_values(dtype, n, rng, 0.3, 1.2);
  in.b = random_values(dtype, n, rng, -0.2, 1.0);
  in.scale_a = random_values(DType::F32, c, rng, 0.8, 0.5);
  in.shift_a = random_values(DType::F32, c, rng, -0.3, 0.5);
  if (normalized) {
    in.scale_b = random_values(DType::F32, c, rng, 0.6, 0.4);
    in.shift_b = random_values(DType::F32, c, rng, 0.1, 0.5);
  }
  return in;
}

// pre = a * scale_a + shift_a + b' in float64, want = relu(pre), slack = 8 u32 T (header).
ApplyReference tail_reference(const TailInputs& in, int64_t c) {
  const size_t n = in.a.size();
  ApplyReference r{std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
  for (size_t i = 0; i < n; ++i) {
    const size_t ch = i % size_t(c);
    const double ta = in.a[i] * in.scale_a[ch];
    const double tb = in.normalized() ? in.b[i] * in.scale_b[ch] : in.b[i];
    const double shift_b = in.normalized() ? in.shift_b[ch] : 0.0;
    r.pre[i] = ta + in.shift_a[ch] + tb + shift_b;
    r.slack[i] = 8 * kU32 * (std::abs(ta) + std::abs(in.shift_a[ch]) + std::abs(tb) + std::abs(shift_b));
    r.want[i] = r.pre[i] > 0 ? r.pre[i] : 0.0;
  }
  return r;
}

// The per-channel vectors on the device; scale_b / shift_b stay nullptr for an identity shortcut.
struct DeviceChannels {
  DeviceTensor scale_a, shift_a, scale_b, shift_b;
  explicit DeviceChannels(const TailInputs& in)
      : scale_a(DType::F32, in.scale_a), shift_a(DType::F32, in.shift_a), scale_b(DType::F32, in.scale_b),
        shift_b(DType::F32, in.shift_b) {}
  const float* sb(const TailInputs& in) const { return in.normalized() ? scale_b.f32() : nullptr; }
  const float* hb(const TailInputs& in) const { return in.normalized() ? shift_b.f32() : nullptr; }
};

// c = 64: 16-byte packs; c = 12: narrow packs, and the flat path with a mask; 7 x 12: a partly
// filled last mask byte; offset 1: misaligned pointers (narrowest packs, flat path with a mask);
// c = 2600: several channel slices.
const std::vector<TileCase> kTailCases = {{4099, 64}, {1000, 12}, {7, 12}, {4099, 64, 1}, {1000, 12, 1},
                                          {301, 2600}};

TEST(ResblockKernelsGpu, AddReluApplyMatchesFloat64) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(31);
  for (DType dt : kDtypes)
    for (const TileCase& k : kTailCases)
      for (bool normalized : {false, true})
        for (bool masked : {true, false}) {
          SCOPED_TRACE(label(dt, k) + (normalized ? " normalized shortcut" : " identity shortcut") +
                       (masked ? " with bit mask" : " without mask"));
          const int64_t n = k.m * k.c;
          const TailInputs in = random_tail(dt, n, k.c, normalized, rng);
          const ApplyReference ref = tail_reference(in, k.c);
          const DeviceTensor a(dt, in.a, k.offset), b(dt, in.b, k.offset);
          const DeviceChannels ch(in);
          DeviceTensor y(dt, n, k.offset);
          DeviceBytes bits(cuda::bitmask_bytes(n));
          for (uint8_t poison : {0xFF, 0x00}) {  // two poisons: a mask byte never written cannot hide
            y.poison(), bits.poison(poison);
            cuda::bn_add_relu_apply(dt, a.ptr(), ch.scale_a.f32(), ch.shift_a.f32(), b.ptr(), ch.sb(in), ch.hb(in),
                                    k.m, k.c, y.ptr(), masked ? bits.ptr() : nullptr, nullptr, "test");
            sync();
            const std::vector<double> got = y.get();
            expect_within_ulp("y", got, ref.want, ref.slack, dt);
            if (masked) {
              expect_mask_equal("bit mask", bits.get(), ref.pre, ref.slack);
              expect_bits_agree_with_y(bits.get(), got);
            }
          }
          // In place: y over a, then over b (the block's output may take either's storage).
          DeviceTensor over_a(dt, in.a, k.offset), over_b(dt, in.b, k.offset);
          cuda::bn_add_relu_apply(dt, over_a.ptr(), ch.scale_a.f32(), ch.shift_a.f32(), b.ptr(), ch.sb(in),
                                  ch.hb(in), k.m, k.c, over_a.ptr(), masked ? bits.ptr() : nullptr, nullptr, "test");
          cuda::bn_add_relu_apply(dt, a.ptr(), ch.scale_a.f32(), ch.shift_a.f32(), over_b.ptr(), ch.sb(in),
                                  ch.hb(in), k.m, k.c, over_b.ptr(), masked ? bits.ptr() : nullptr, nullptr, "test");
          sync();
          expect_within_ulp("y written over a", over_a.get(), ref.want, ref.slack, dt);
          expect_within_ulp("y written over b", over_b.get(), ref.want, ref.slack, dt);
          if (masked) expect_mask_equal("bit mask (in place)", bits.get(), ref.pre, ref.slack);
        }
}

// A NaN pre-activation fails "v > 0": y = 0 and a 0 bit, on the packed path and the flat one.
TEST(ResblockKernelsGpu, AddReluNaNGivesZeroAndAClearBit) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(32);
  for (DType dt : kDtypes)
    for (const TileCase& k : {TileCase{64, 64}, TileCase{64, 12}}) {
      SCOPED_TRACE(label(dt, k));
      const int64_t n = k.m * k.c;
      TailInputs in = random_tail(dt, n, k.c, /*normalized=*/true, rng);
      const std::vector<size_t> nans = {0, 5, 13, size_t(n) / 2, size_t(n) - 1};
      for (size_t i : nans) in.a[i] = std::numeric_limits<double>::quiet_NaN();
      const DeviceTensor a(dt, in.a), b(dt, in.b);
      const DeviceChannels ch(in);
      DeviceTensor y = DeviceTensor::poisoned(dt, n);
      DeviceBytes bits(cuda::bitmask_bytes(n));
      bits.poison(0xFF);
      cuda::bn_add_relu_apply(dt, a.ptr(), ch.scale_a.f32(), ch.shift_a.f32(), b.ptr(), ch.sb(in), ch.hb(in), k.m,
                              k.c, y.ptr(), bits.ptr(), nullptr, "test");
      sync();
      const std::vector<double> got = y.get();
      const std::vector<uint8_t> mask = bits.get();
      for (size_t i : nans) {
        EXPECT_EQ(got[i], 0.0) << "y at NaN element " << i;
        EXPECT_FALSE(bit(mask, i)) << "mask bit at NaN element " << i;
      }
      // The others as usual (NaN elements set to 0 in the reference, with slack for them).
      for (size_t i : nans) in.a[i] = 0;
      ApplyReference ref = tail_reference(in, k.c);
      for (size_t i : nans) ref.want[i] = 0, ref.slack[i] = 0;
      expect_within_ulp("y", got, ref.want, ref.slack, dt);
      expect_bits_agree_with_y(mask, got);
    }
}

TEST(ResblockKernelsGpu, RejectBadArguments) {
  KILN_REQUIRE_GPU();
  const int64_t m = 16, c = 8;
  DeviceTensor x(DType::F16, m * c), y(DType::F16, m * c), p(DType::F32, c);
  DeviceBytes bits(cuda::bitmask_bytes(m * c));
  testing::expect_error(
      [&] {
        cuda::bn_add_relu_apply(DType::F16, x.ptr(), p.f32(), p.f32(), x.ptr(), p.f32(), nullptr, m, c, y.ptr(),
                                bits.ptr(), nullptr, "layer 'tail'");
      },
      {"layer 'tail'", "scale_b / shift_b"});
  testing::expect_error(
      [&] {
        cuda::bn_add_relu_apply(DType::F64, x.ptr(), p.f32(), p.f32(), x.ptr(), nullptr, nullptr, m, c, y.ptr(),
                                nullptr, nullptr, "layer 'tail'");
      },
      {"F64"});
}

// --- The ops, through the CUDA op table ---

// Runs ops of layer 2, "layer1.0.tail", as an executable does: prepared (cuDNN plans built,
// workspace requested and allocated), run on the backend's streams, waited for. Tensors are given
// by their contract names; a name left out is an absent optional tensor. Plans are not tuned:
// these tests are about results.
class ResblockOps {
 public:
  using Tensors = std::map<std::string, TensorArg>;

  // The backend's options: no tuning.
  ResblockOps() : backend_(0, options()) { register_cuda_ops(); }

  TensorArg arg(const Shape& shape, const DeviceTensor& t) { return bench_.arg(shape, t.ptr(), t.dtype); }
  TensorArg channels(const DeviceTensor& t) { return bench_.arg({int64_t(t.n)}, t.ptr(), DType::F32); }
  TensorArg bits(const DeviceBytes& t) { return bench_.arg({int64_t(t.n)}, t.ptr(), DType::U8); }

  template <template <class> class C>
  void run(C<TensorId> contract, const Tensors& tensors, OpKind kind = C<TensorId>::kind) {
    Binder binder{tensors};
    contract.fields(binder);
    ASSERT_EQ(binder.used, tensors.size()) << "a tensor name the contract does not have";
    Op op = make_op(contract, bench_.layer());
    op.kind = kind;
    const OpCall call{op, bench_.program, binder.in_args, binder.out_args, bench_.scalars, &backend_};
    // Uploads and poisoning go through the legacy default stream, which the backend's
    // non-blocking streams do not wait for: finish them first.
    sync();
    if (PrepareFn prepare = find_prepare(Device::CUDA, op.kind)) prepare(call);
    backend_.finish_prepare();
    find_op(Device::CUDA, op.kind)(call);
    backend_.synchronize();
    sync();
  }

 private:
  // Gives the contract's fields ids in visiting order and collects their arguments.
  struct Binder {
    explicit Binder(const Tensors& named) : tensors(named) {}
    const Tensors& tensors;
    std::vector<TensorArg> in_args, out_args;
    size_t used = 0;
    int next = 0;
    void in(const char* name, TensorId& t, Presence = kRequired) { bind(name, t, in_args); }
    void out(const char* name, TensorId& t, Presence = kRequired) { bind(name, t, out_args); }
    template <class A>
    void attr(const char*, A&) {}
    void bind(const char* name, TensorId& t, std::vector<TensorArg>& args) {
      const auto it = tensors.find(name);
      t = it == tensors.end() ? -1 : next++;
      args.push_back(it == tensors.end() ? TensorArg{} : it->second);
      used += it != tensors.end();
    }
  };

  testing::OpBench bench_{2, "layer1.0.tail"};
  cuda::CudaBackend backend_;

  static CudaOptions options() {
    CudaOptions o;
    o.tune = false;
    return o;
  }
};

const Shape kTailShapes[] = {{2, 7, 7, 64}, {2, 5, 5, 12}};

TEST(ResblockOpsGpu, BnAddReluForwardAndInference) {
  KILN_REQUIRE_GPU();
  ResblockOps ops;
  std::mt19937 rng(34);
  for (DType dt : kDtypes)
    for (const Shape& shape : kTailShapes)
      for (bool normalized : {false, true}) {
        SCOPED_TRACE(std::string(name(dt)) + " " + shape_str(shape) + (normalized ? " normalized" : " identity"));
        const int64_t c = shape.back(), n = numel(shape);
        const TailInputs in = random_tail(dt, n, c, normalized, rng);
        const ApplyReference ref = tail_reference(in, c);
        const DeviceTensor a(dt, in.a), b(dt, in.b);
        const DeviceChannels ch(in);
        DeviceTensor y = DeviceTensor::poisoned(dt, n), y_inf = DeviceTensor::poisoned(dt, n);
        DeviceBytes bits(cuda::bitmask_bytes(n));
        bits.poison(0xFF);
        ResblockOps::Tensors t = {{"a", ops.arg(shape, a)},
                                  {"scale_a", ops.channels(ch.scale_a)},
                                  {"shift_a", ops.channels(ch.shift_a)},
                                  {"b", ops.arg(shape, b)},
                                  {"y", ops.arg(shape, y)},
                                  {"bitmask", ops.bits(bits)}};
        if (normalized) t["scale_b"] = ops.channels(ch.scale_b), t["shift_b"] = ops.channels(ch.shift_b);
        ops.run(BnAddRelu<TensorId>{}, t);
        const std::vector<double> got = y.get();
        expect_within_ulp("y", got, ref.want, ref.slack, dt);
        expect_mask_equal("bit mask", bits.get(), ref.pre, ref.slack);
        expect_bits_agree_with_y(bits.get(), got);
        // Inference: the same pass without the mask, so the same values.
        t["y"] = ops.arg(shape, y_inf);
        t.erase("bitmask");
        ops.run(BnAddRelu<TensorId>{}, t, OpKind::BN_ADD_RELU_INF);
        EXPECT_EQ(y_inf.get(), got) << "BN_ADD_RELU_INF differs from the training forward";
      }
}

// Shortcut variants of the backward.
enum class Shortcut { kNormalized, kIdentity, kDataBatch };  // data batch: identity without db
const char* shortcut_name(Shortcut s) {
  switch (s) {
    case Shortcut::kNormalized: return "normalized shortcut";
    case Shortcut::kIdentity: return "identity shortcut";
    default: return "identity shortcut of the data batch (no db)";
  }
}

TEST(ResblockOpsGpu, BnAddReluBackwardMatchesFloat64) {
  KILN_REQUIRE_GPU();
  ResblockOps ops;
  std::mt19937 rng(35);
  for (DType dt : kDtypes)
    for (const Shape& shape : kTailShapes)
      for (Shortcut shortcut : {Shortcut::kNormalized, Shortcut::kIdentity, Shortcut::kDataBatch}) {
        SCOPED_TRACE(std::string(name(dt)) + " " + shape_str(shape) + " " + shortcut_name(shortcut));
        const int64_t c = shape.back(), n = numel(shape), m = n / c;
        const bool normalized = shortcut == Shortcut::kNormalized;
        const std::vector<double> dyv = random_values(dt, n, rng, 0.05, 1.0), av = random_values(dt, n, rng, 0.7, 1.3),
                                  bv = random_values(dt, n, rng, -0.4, 2.0),
                                  gamma_a = random_values(DType::F32, c, rng, 1.0, 0.3),
                                  gamma_b = random_values(DType::F32, c, rng, 0.8, 0.3);
        const std::vector<uint8_t> maskv = random_bytes(cuda::bitmask_bytes(n), rng);
        std::vector<double> mean_a, inv_a, mean_b, inv_b;
        reference_stats(av, m, c, mean_a, inv_a);
        reference_stats(bv, m, c, mean_b, inv_b);
        const BnBackwardReference ref_a = bn_backward_reference(dyv, &maskv, av, gamma_a, mean_a, inv_a, m, c);
        const BnBackwardReference ref_b = bn_backward_reference(dyv, &maskv, bv, gamma_b, mean_b, inv_b, m, c);
        std::vector<double> g(size_t(n), 0.0);  // the masked dy: the identity shortcut's gradient
        for (int64_t i = 0; i < n; ++i)
          if (bit(maskv, size_t(i))) g[i] = dyv[i];

        const DeviceTensor dy(dt, dyv), a(dt, av), b(dt, bv), ga(DType::F32, gamma_a), gb(DType::F32, gamma_b),
            ma(DType::F32, mean_a), ia(DType::F32, inv_a), mb(DType::F32, mean_b), ib(DType::F32, inv_b);
        const DeviceBytes mask(maskv);
        DeviceTensor da = DeviceTensor::poisoned(dt, n), db = DeviceTensor::poisoned(dt, n),
                     dga = DeviceTensor::poisoned(DType::F32, c), dba = DeviceTensor::poisoned(DType::F32, c),
                     dgb = DeviceTensor::poisoned(DType::F32, c), dbb = DeviceTensor::poisoned(DType::F32, c);
        ResblockOps::Tensors t = {{"dy", ops.arg(shape, dy)},         {"bitmask", ops.bits(mask)},
                                  {"a", ops.arg(shape, a)},           {"gamma_a", ops.channels(ga)},
                                  {"saved_mean_a", ops.channels(ma)}, {"saved_inv_std_a", ops.channels(ia)},
                                  {"da", ops.arg(shape, da)},         {"dgamma_a", ops.channels(dga)},
                                  {"dbeta_a", ops.channels(dba)}};
        if (normalized) {
          t["b"] = ops.arg(shape, b), t["gamma_b"] = ops.channels(gb), t["saved_mean_b"] = ops.channels(mb);
          t["saved_inv_std_b"] = ops.channels(ib), t["dgamma_b"] = ops.channels(dgb), t["dbeta_b"] = ops.channels(dbb);
        }
        if (shortcut != Shortcut::kDataBatch) t["db"] = ops.arg(shape, db);
        ops.run(BnAddReluBackward<TensorId>{}, t);

        expect_close("dbeta_a", dba.get(), ref_a.sum_dy, 1e-5);
        expect_close("dgamma_a", dga.get(), ref_a.sum_dy_xhat, 1e-5);
        expect_close("da", da.get(), ref_a.dx, tolerance(dt));
        if (normalized) {
          expect_close("dbeta_b", dbb.get(), ref_b.sum_dy, 1e-5);
          expect_close("dgamma_b", dgb.get(), ref_b.sum_dy_xhat, 1e-5);
          expect_close("db", db.get(), ref_b.dx, tolerance(dt));
        } else if (shortcut == Shortcut::kIdentity) {
          EXPECT_EQ(db.get(), g) << "db of an identity shortcut must be exactly the masked dy";
        } else {
          EXPECT_TRUE(std::isnan(db.get()[0])) << "db was written although the op had none";
        }
      }
}

// The gradient in two terms (a block end's whose output feeds two layers) against GRAD_SUM's sum of the same
// terms on the same GPU, on the packed, narrow and normalized paths. Each element of g = dy + dy2
// is GRAD_SUM's bits, so an identity shortcut's db (g itself) must be equal bit for bit. The sums
// may not be: the two-term reduce kernel holds more registers, so its one-wave grid can split the
// rows differently and add the same fp32 terms in another order. Both orders are within 1e-5 of
// float64 (BnAddReluBackwardMatchesFloat64's bound for these sums), so they differ by at most 2e-5;
// da and db follow from sums that close within that plus their dtype's rounding. The first term
// alone (the second is about half its size) misses every bound tenfold at least: a kernel that
// dropped the second term fails.
TEST(ResblockOpsGpu, BnAddReluBackwardTakesItsGradientInTwoTerms) {
  KILN_REQUIRE_GPU();
  ResblockOps ops;
  std::mt19937 rng(37);
  for (DType dt : kDtypes)
    for (const Shape& shape : kTailShapes)
      for (bool normalized : {true, false}) {
        SCOPED_TRACE(std::string(name(dt)) + " " + shape_str(shape) + (normalized ? " normalized" : " identity"));
        const int64_t c = shape.back(), n = numel(shape), m = n / c;
        const std::vector<double> first_v = random_values(dt, n, rng, 0.05, 1.0),
                                  second_v = random_values(dt, n, rng, -0.03, 0.5),
                                  av = random_values(dt, n, rng, 0.7, 1.3), bv = random_values(dt, n, rng, -0.4, 2.0),
                                  gamma = random_values(DType::F32, c, rng, 1.0, 0.3);
        std::vector<double> mean_a, inv_a, mean_b, inv_b;
        reference_stats(av, m, c, mean_a, inv_a);
        reference_stats(bv, m, c, mean_b, inv_b);
        const DeviceTensor first(dt, first_v), second(dt, second_v), a(dt, av), b(dt, bv), g(DType::F32, gamma),
            ma(DType::F32, mean_a), ia(DType::F32, inv_a), mb(DType::F32, mean_b), ib(DType::F32, inv_b);
        DeviceTensor whole = DeviceTensor::poisoned(dt, n);
        const void* terms[] = {first.ptr(), second.ptr()};
        cuda::grad_sum(dt, terms, 2, n, whole.ptr(), nullptr, "test");
        sync();  // the op runs on the backend's own stream
        const DeviceBytes mask(random_bytes(cuda::bitmask_bytes(n), rng));
        // The op's outputs for dy = `dy` (and dy2 = `dy2` when given), as host values.
        auto backward = [&](const DeviceTensor& dy, const DeviceTensor* dy2) {
          DeviceTensor da = DeviceTensor::poisoned(dt, n), db = DeviceTensor::poisoned(dt, n),
                       dga = DeviceTensor::poisoned(DType::F32, c), dba = DeviceTensor::poisoned(DType::F32, c),
                       dgb = DeviceTensor::poisoned(DType::F32, c), dbb = DeviceTensor::poisoned(DType::F32, c);
          ResblockOps::Tensors t = {{"dy", ops.arg(shape, dy)},        {"bitmask", ops.bits(mask)},
                                    {"a", ops.arg(shape, a)},          {"gamma_a", ops.channels(g)},
                                    {"saved_mean_a", ops.channels(ma)}, {"saved_inv_std_a", ops.channels(ia)},
                                    {"da", ops.arg(shape, da)},        {"dgamma_a", ops.channels(dga)},
                                    {"dbeta_a", ops.channels(dba)},    {"db", ops.arg(shape, db)}};
          if (dy2) t["dy2"] = ops.arg(shape, *dy2);
          if (normalized) {
            t["b"] = ops.arg(shape, b), t["gamma_b"] = ops.channels(g), t["saved_mean_b"] = ops.channels(mb);
            t["saved_inv_std_b"] = ops.channels(ib), t["dgamma_b"] = ops.channels(dgb), t["dbeta_b"] = ops.channels(dbb);
          }
          ops.run(BnAddReluBackward<TensorId>{}, t);
          std::vector<std::vector<double>> out{da.get(), db.get(), dga.get(), dba.get()};
          if (normalized) out.push_back(dgb.get()), out.push_back(dbb.get());
          return out;
        };
        const auto summed = backward(whole, nullptr), two_terms = backward(first, &second);
        const auto first_only = backward(first, nullptr);
        const char* names[] = {"da", "db", "dgamma_a", "dbeta_a", "dgamma_b", "dbeta_b"};
        for (size_t k = 0; k < summed.size(); ++k) {
          const bool sums = k >= 2, exact = k == 1 && !normalized;  // db = g for an identity shortcut
          const double bound = sums ? 2e-5 : 2e-5 + one_ulp(dt);
          if (exact) {
            EXPECT_EQ(two_terms[k], summed[k]) << names[k];
          } else {
            expect_close(names[k], two_terms[k], summed[k], bound);
          }
          EXPECT_GT(testing::rel_l2(first_only[k], summed[k]), 10 * bound) << names[k] << ": the bound cannot tell the terms";
        }
      }
}

// A block end with a normalized shortcut sums both branches' BatchNorm gradients in one pass
// (bn_backward_reduce_pair), with the gradient whole and in two terms, against one
// bn_backward_reduce per branch. The sum of g is computed once for both branches, so dbeta_b must
// be dbeta_a's bits. The rest may differ in the order the fp32 terms are added (the one-pass
// kernel's one-wave grid follows its own occupancy): within 2e-5 (both within 1e-5 of float64,
// BnAddReluBackwardMatchesFloat64's bound, which also holds the op's da and db to float64). The
// branches' dgamma differ from each other by far more than that bound, so a pass that took one
// branch's input or statistics for the other fails.
TEST(ResblockOpsGpu, BnAddReluBackwardSumsBothBranchesInOnePass) {
  KILN_REQUIRE_GPU();
  ResblockOps ops;
  std::mt19937 rng(41);
  for (DType dt : kDtypes)
    for (const Shape& shape : kTailShapes)
      for (bool terms : {false, true}) {
        SCOPED_TRACE(std::string(name(dt)) + " " + shape_str(shape) + (terms ? " two terms" : " one term"));
        const int64_t c = shape.back(), n = numel(shape), m = n / c;
        const std::vector<double> dyv = random_values(dt, n, rng, 0.05, 1.0),
                                  dy2v = random_values(dt, n, rng, -0.03, 0.5),
                                  av = random_values(dt, n, rng, 0.7, 1.3), bv = random_values(dt, n, rng, -0.4, 2.0),
                                  gamma_a = random_values(DType::F32, c, rng, 1.0, 0.3),
                                  gamma_b = random_values(DType::F32, c, rng, 0.8, 0.3);
        std::vector<double> mean_a, inv_a, mean_b, inv_b;
        reference_stats(av, m, c, mean_a, inv_a);
        reference_stats(bv, m, c, mean_b, inv_b);
        const DeviceTensor dy(dt, dyv), dy2(dt, dy2v), a(dt, av), b(dt, bv), ga(DType::F32, gamma_a),
            gb(DType::F32, gamma_b), ma(DType::F32, mean_a), ia(DType::F32, inv_a), mb(DType::F32, mean_b),
            ib(DType::F32, inv_b);
        const DeviceBytes mask(random_bytes(cuda::bitmask_bytes(n), rng));
        // The op: dgamma_a, dbeta_a, dgamma_b, dbeta_b.
        DeviceTensor da = DeviceTensor::poisoned(dt, n), db = DeviceTensor::poisoned(dt, n),
                     dga = DeviceTensor::poisoned(DType::F32, c), dba = DeviceTensor::poisoned(DType::F32, c),
                     dgb = DeviceTensor::poisoned(DType::F32, c), dbb = DeviceTensor::poisoned(DType::F32, c);
        ResblockOps::Tensors t = {
            {"dy", ops.arg(shape, dy)},           {"bitmask", ops.bits(mask)},
            {"a", ops.arg(shape, a)},             {"gamma_a", ops.channels(ga)},
            {"saved_mean_a", ops.channels(ma)},   {"saved_inv_std_a", ops.channels(ia)},
            {"da", ops.arg(shape, da)},           {"dgamma_a", ops.channels(dga)},
            {"dbeta_a", ops.channels(dba)},       {"db", ops.arg(shape, db)},
            {"b", ops.arg(shape, b)},             {"gamma_b", ops.channels(gb)},
            {"saved_mean_b", ops.channels(mb)},   {"saved_inv_std_b", ops.channels(ib)},
            {"dgamma_b", ops.channels(dgb)},      {"dbeta_b", ops.channels(dbb)}};
        if (terms) t["dy2"] = ops.arg(shape, dy2);
        ops.run(BnAddReluBackward<TensorId>{}, t);
        const std::vector<std::vector<double>> one = {dga.get(), dba.get(), dgb.get(), dbb.get()};
        // One pass per branch.
        const size_t ws_bytes = cuda::bn_backward_reduce_workspace_bytes(m, c);
        DeviceBuffer ws(ws_bytes);
        std::vector<std::vector<double>> each;
        for (const auto& [x, mean, inv] : {std::tuple{&a, &ma, &ia}, std::tuple{&b, &mb, &ib}}) {
          DeviceTensor dgamma = DeviceTensor::poisoned(DType::F32, c), dbeta = DeviceTensor::poisoned(DType::F32, c);
          cuda::bn_backward_reduce(dt, dy.ptr(), terms ? dy2.ptr() : nullptr, mask.ptr(), x->ptr(), mean->f32(),
                                   inv->f32(), m, c, dbeta.f32(), dgamma.f32(), ws.get(), ws_bytes, nullptr, "test");
          sync();
          each.push_back(dgamma.get()), each.push_back(dbeta.get());
        }
        EXPECT_EQ(one[3], one[1]) << "dbeta_b and dbeta_a are the one sum of g";
        const char* names[] = {"dgamma_a", "dbeta_a", "dgamma_b", "dbeta_b"};
        for (size_t k = 0; k < one.size(); ++k) expect_close(names[k], one[k], each[k], 2e-5);
        EXPECT_GT(testing::rel_l2(one[2], one[0]), 10 * 2e-5) << "the branches' dgamma cannot be told apart";
      }
}

TEST(ResblockOpsGpu, BnAddReluOpsRejectMalformedPrograms) {
  KILN_REQUIRE_GPU();
  ResblockOps ops;
  const Shape shape{2, 4, 4, 8};
  const int64_t c = 8, n = numel(shape);
  const DeviceTensor act(DType::F16, n), out(DType::F16, n), p(DType::F32, c), wrong(DType::F16, c);
  const DeviceBytes bits(cuda::bitmask_bytes(n));
  ResblockOps::Tensors fwd = {{"a", ops.arg(shape, act)},     {"scale_a", ops.channels(p)},
                              {"shift_a", ops.channels(p)},   {"b", ops.arg(shape, act)},
                              {"y", ops.arg(shape, out)},     {"bitmask", ops.bits(bits)}};
  ResblockOps::Tensors no_mask = fwd;
  no_mask.erase("bitmask");
  testing::expect_error([&] { ops.run(BnAddRelu<TensorId>{}, no_mask); },
                        {"BN_ADD_RELU_FWD 'layer1.0.tail'", "bitmask", "recompile"});
  ResblockOps::Tensors half_b = fwd;
  half_b["scale_b"] = ops.channels(p);
  testing::expect_error([&] { ops.run(BnAddRelu<TensorId>{}, half_b); }, {"scale_b and shift_b", "recompile"});
  ResblockOps::Tensors fp16_scale = fwd;
  fp16_scale["scale_a"] = ops.arg({c}, wrong);
  testing::expect_error([&] { ops.run(BnAddRelu<TensorId>{}, fp16_scale); }, {"scale_a", "F32"});

  ResblockOps::Tensors bwd = {{"dy", ops.arg(shape, act)},         {"bitmask", ops.bits(bits)},
                              {"a", ops.arg(shape, act)},          {"gamma_a", ops.channels(p)},
                              {"saved_mean_a", ops.channels(p)},   {"saved_inv_std_a", ops.channels(p)},
                              {"da", ops.arg(shape, out)},         {"dgamma_a", ops.channels(p)},
                              {"dbeta_a", ops.channels(p)},        {"b", ops.arg(shape, act)}};
  testing::expect_error([&] { ops.run(BnAddReluBackward<TensorId>{}, bwd); },
                        {"BN_ADD_RELU_BWD 'layer1.0.tail'", "together", "1 of 6"});
  for (const char* name : {"gamma_b", "saved_mean_b", "saved_inv_std_b", "dgamma_b", "dbeta_b"})
    bwd[name] = ops.channels(p);
  testing::expect_error([&] { ops.run(BnAddReluBackward<TensorId>{}, bwd); }, {"'db'"});
  ResblockOps::Tensors lone_term = bwd;  // a second gradient term without the shortcut's gradient
  for (const char* name : {"b", "gamma_b", "saved_mean_b", "saved_inv_std_b", "dgamma_b", "dbeta_b"})
    lone_term.erase(name);
  lone_term["dy2"] = ops.arg(shape, act);
  testing::expect_error([&] { ops.run(BnAddReluBackward<TensorId>{}, lone_term); }, {"'dy2'", "'db'"});
}

// --- CONV_BN_* ---

using cbr_test::Geometry;

struct ConvCase {
  const char* what;
  Geometry g;  // n, h, w, c, k, kernel, stride, pad
};

const ConvCase kConvCases[] = {
    {"3x3 stride 1 pad 1", {2, 8, 8, 16, 32, 3, 1, 1}},
    {"3x3 stride 2 pad 1 (downsampling)", {2, 9, 9, 16, 32, 3, 2, 1}},
    {"1x1 stride 2 (projection shortcut)", {2, 8, 8, 32, 64, 1, 2, 0}},
};

Shape x_shape(const Geometry& g) { return {g.n, g.h, g.w, g.c}; }
Shape w_shape(const Geometry& g) { return {g.k, g.kernel, g.kernel, g.c}; }
Shape y_shape(const Geometry& g) { return {g.n, g.ho(), g.wo(), g.k}; }

std::vector<double> positive_variances(int64_t k, std::mt19937& rng) {
  std::vector<double> v = random_values(DType::F32, k, rng);
  for (double& x : v) x = static_cast<float>(0.5 + x * x);
  return v;
}

TEST(ResblockOpsGpu, ConvBnForwardAndInferenceMatchFloat64) {
  KILN_REQUIRE_GPU();
  ResblockOps ops;
  std::mt19937 rng(36);
  const double eps = 1e-5, momentum = 0.1;
  for (DType dt : kDtypes)
    for (const ConvCase& cc : kConvCases) {
      SCOPED_TRACE(std::string(name(dt)) + " " + cc.what);
      const Geometry& g = cc.g;
      const std::vector<double> xv = random_values(dt, g.x_numel(), rng, 0.5, 1.0),
                                wv = random_values(dt, g.w_numel(), rng, 0.0, 0.2),
                                gamma = random_values(DType::F32, g.k, rng, 1.0, 0.3),
                                beta = random_values(DType::F32, g.k, rng, 0.0, 0.5),
                                rm = random_values(DType::F32, g.k, rng, 0.0, 0.5), rv = positive_variances(g.k, rng);
      const cbr_test::Forward f = cbr_test::reference_forward(g, xv, wv, gamma, beta, rm, rv, eps, momentum);
      std::vector<double> scale(g.k), shift(g.k), inf_scale(g.k), inf_shift(g.k);
      for (int64_t k = 0; k < g.k; ++k) {
        scale[k] = gamma[k] * f.inv_std[k];
        shift[k] = beta[k] - f.mean[k] * scale[k];
        inf_scale[k] = gamma[k] / std::sqrt(rv[k] + eps);
        inf_shift[k] = beta[k] - rm[k] * inf_scale[k];
      }

      const DeviceTensor x(dt, xv), w(dt, wv), dgamma(DType::F32, gamma), dbeta(DType::F32, beta);
      DeviceTensor drm(DType::F32, rm), drv(DType::F32, rv);
      DeviceTensor conv_out = DeviceTensor::poisoned(dt, g.y_numel()),
                   mean = DeviceTensor::poisoned(DType::F32, g.k), inv = DeviceTensor::poisoned(DType::F32, g.k),
                   sc = DeviceTensor::poisoned(DType::F32, g.k), sh = DeviceTensor::poisoned(DType::F32, g.k);
      ConvBnForward<TensorId> fwd;
      fwd.stride = int(g.stride), fwd.padding = int(g.pad), fwd.eps = float(eps), fwd.momentum = float(momentum);
      ops.run(fwd, {{"x", ops.arg(x_shape(g), x)},
                    {"w", ops.arg(w_shape(g), w)},
                    {"gamma", ops.channels(dgamma)},
                    {"beta", ops.channels(dbeta)},
                    {"conv_out", ops.arg(y_shape(g), conv_out)},
                    {"saved_mean", ops.channels(mean)},
                    {"saved_inv_std", ops.channels(inv)},
                    {"scale", ops.channels(sc)},
                    {"shift", ops.channels(sh)},
                    {"running_mean", ops.channels(drm)},
                    {"running_var", ops.channels(drv)}});
      // Statistics of the GPU's conv_out (rounded to the dtype, and its fp32 sums) against
      // float64's: the dtype's rounding of each value, averaged over the batch, dominates.
      const double tol = tolerance(dt);
      expect_close("conv_out", conv_out.get(), f.z, tol);
      expect_close("saved_mean", mean.get(), f.mean, tol);
      expect_close("saved_inv_std", inv.get(), f.inv_std, tol);
      expect_close("scale", sc.get(), scale, tol);
      expect_close("shift", sh.get(), shift, tol);
      expect_close("running_mean", drm.get(), f.running_mean, tol);
      expect_close("running_var", drv.get(), f.running_var, tol);

      // Inference from the running statistics as they were before this step.
      drm.set(rm), drv.set(rv);
      conv_out.poison(), sc.poison(), sh.poison();
      ConvBnInference<TensorId> inf;
      inf.stride = int(g.stride), inf.padding = int(g.pad), inf.eps = float(eps);
      ops.run(inf, {{"x", ops.arg(x_shape(g), x)},
                    {"w", ops.arg(w_shape(g), w)},
                    {"gamma", ops.channels(dgamma)},
                    {"beta", ops.channels(dbeta)},
                    {"running_mean", ops.channels(drm)},
                    {"running_var", ops.channels(drv)},
                    {"conv_out", ops.arg(y_shape(g), conv_out)},
                    {"scale", ops.channels(sc)},
                    {"shift", ops.channels(sh)}});
      expect_close("inference conv_out", conv_out.get(), f.z, tol);
      expect_close("inference scale", sc.get(), inf_scale, 1e-6);
      expect_close("inference shift", sh.get(), inf_shift, 1e-6);
    }
}

// dx placement of the backward: its own memory, none (first layer), or over x (dgrad must wait
// for wgrad's read of x).
enum class DxPlace { kApart, kAbsent, kOverX };
const char* dx_place_name(DxPlace p) {
  switch (p) {
    case DxPlace::kApart: return "dx apart";
    case DxPlace::kAbsent: return "no dx (first layer)";
    default: return "dx over x";
  }
}

TEST(ResblockOpsGpu, ConvBnBackwardMatchesFloat64) {
  KILN_REQUIRE_GPU();
  ResblockOps ops;
  std::mt19937 rng(37);
  for (DType dt : kDtypes)
    for (const ConvCase& cc : kConvCases)
      for (DxPlace place : {DxPlace::kApart, DxPlace::kAbsent, DxPlace::kOverX}) {
        SCOPED_TRACE(std::string(name(dt)) + " " + cc.what + ", " + dx_place_name(place));
        const Geometry& g = cc.g;
        const std::vector<double> xv = random_values(dt, g.x_numel(), rng, 0.2, 1.0),
                                  wv = random_values(dt, g.w_numel(), rng, 0.0, 0.2),
                                  dconv_v = random_values(dt, g.y_numel(), rng, 0.0, 0.5);
        std::vector<double> want_dx(g.x_numel(), 0.0), want_dw(g.w_numel(), 0.0);
        cbr_test::Conv{g}.for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) {
          want_dx[xi] += dconv_v[yi] * wv[wi];
          want_dw[wi] += dconv_v[yi] * xv[xi];
        });
        const DeviceTensor w(dt, wv), dconv(dt, dconv_v);
        DeviceTensor x(dt, xv), dx = DeviceTensor::poisoned(dt, g.x_numel()),
                                dw = DeviceTensor::poisoned(dt, g.w_numel());
        ConvBnBackward<TensorId> bwd;
        bwd.stride = int(g.stride), bwd.padding = int(g.pad);
        ResblockOps::Tensors t = {{"dconv", ops.arg(y_shape(g), dconv)},
                                  {"x", ops.arg(x_shape(g), x)},
                                  {"w", ops.arg(w_shape(g), w)},
                                  {"dw", ops.arg(w_shape(g), dw)}};
        if (place == DxPlace::kApart) t["dx"] = ops.arg(x_shape(g), dx);
        if (place == DxPlace::kOverX) t["dx"] = ops.arg(x_shape(g), x);
        ops.run(bwd, t);
        expect_close("dw", dw.get(), want_dw, tolerance(dt));
        if (place == DxPlace::kApart) expect_close("dx", dx.get(), want_dx, tolerance(dt));
        if (place == DxPlace::kOverX) expect_close("dx written over x", x.get(), want_dx, tolerance(dt));
      }
}

TEST(ResblockOpsGpu, ConvBnForwardRejectsASingleValuePerChannel) {
  KILN_REQUIRE_GPU();
  ResblockOps ops;
  const Geometry g{1, 1, 1, 8, 8, 1, 1, 0};  // one output value per channel
  const DeviceTensor x(DType::F32, g.x_numel()), w(DType::F32, g.w_numel()), y(DType::F32, g.y_numel()),
      p(DType::F32, g.k), q(DType::F32, g.k);
  testing::expect_error(
      [&] {
        ops.run(ConvBnForward<TensorId>{}, {{"x", ops.arg(x_shape(g), x)},
                                            {"w", ops.arg(w_shape(g), w)},
                                            {"gamma", ops.channels(p)},
                                            {"beta", ops.channels(p)},
                                            {"conv_out", ops.arg(y_shape(g), y)},
                                            {"saved_mean", ops.channels(q)},
                                            {"saved_inv_std", ops.channels(q)},
                                            {"scale", ops.channels(q)},
                                            {"shift", ops.channels(q)},
                                            {"running_mean", ops.channels(q)},
                                            {"running_var", ops.channels(q)}});
      },
      {"CONV_BN_FWD 'layer1.0.tail'", "more than one value per channel"});
}

}  // namespace
}  // namespace kiln
