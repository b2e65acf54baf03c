// Group normalization in compiled programs: a layer on a map and on flat features, forward,
// backward and inference in float64 and float32 against float64 loops (group_norm_test_reference.h),
// the parameters' gradients included; what the lowering declares (PyTorch's parameter names, the
// saved statistics, the GPU's workspace and fp32 masters in mixed precision), a layer on the data
// batch and a frozen one; the costs; and the refusals of the DSL and of shape inference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/group_norm/group_norm_contract.h"
#include "ops/group_norm/group_norm_geometry.h"
#include "ops/group_norm/group_norm_test_reference.h"
#include "runtime/op_cost.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using group_norm_test::Extents;
using group_norm_test::outside_bound;
using testing::expect_error;

constexpr double kDoubleUnit = 0x1p-53;
constexpr double kFloatUnit = 0x1p-24;

// A group norm on the input map (5 x 6 x 8, 4 groups of 2 channels), or on its flattened 240
// features in 6 groups of 40.
Blueprint on_map() {
  Blueprint m("on_map");
  m.input(5, 6, 8).group_norm(4, 1e-3f, "gn");
  return m;
}
Blueprint on_features() {
  Blueprint m("on_features");
  m.input(5, 6, 8).flatten("flat").group_norm(6, 1e-2f, "gn");
  return m;
}

struct ProgramRun {
  Extents e;
  float eps = 0;
  std::vector<double> x, weight, bias, dy, y, dx, dweight, dbias, mean, rstd, x2, y2;
};

// The program in `precision` (FP64 or FP32) with the layer's weight and bias drawn at random:
// forward, backward, then inference on other data.
ProgramRun run(const Blueprint& model, Precision precision, const Extents& e, float eps, uint32_t seed) {
  CompileOptions o;
  o.precision = precision, o.batch = int(e.n), o.loss = false, o.input_grad = true;
  Executable exe(compile(model, o), 3);
  const Program& p = exe.program();
  const bool fp64 = precision == Precision::FP64;
  std::mt19937 rng(seed);
  auto values = [&](size_t n, double mean) {
    std::normal_distribution<double> d(mean, 1.0);
    std::vector<double> v(n);
    for (double& x : v) x = fp64 ? d(rng) : double(float(d(rng)));
    return v;
  };
  auto write = [&](int id, const std::vector<double>& v) {
    if (fp64) return exe.write(id, v.data(), v.size() * sizeof(double));
    const std::vector<float> f(v.begin(), v.end());
    exe.write(id, f.data(), f.size() * sizeof(float));
  };
  auto read = [&](int id) {
    if (fp64) return exe.read<double>(id);
    const std::vector<float> f = exe.read<float>(id);
    return std::vector<double>(f.begin(), f.end());
  };
  ProgramRun r;
  r.e = e, r.eps = eps;
  const size_t map = size_t(e.elements()), c = size_t(e.c);
  r.x = values(map, 1.5), r.weight = values(c, 1.0), r.bias = values(c, 0.0), r.dy = values(map, 0.0);
  r.x2 = values(map, -0.5);
  write(p.input, r.x), write(p.output_grad, r.dy);
  write(exe.id("gn.weight"), r.weight), write(exe.id("gn.bias"), r.bias);
  const StepScalars s{0.f, 0, 1};
  exe.run_forward(s);
  r.y = read(p.logits), r.mean = read(exe.id("gn:saved_mean")), r.rstd = read(exe.id("gn:saved_rstd"));
  exe.run_backward(s);
  r.dx = read(p.input_grad), r.dweight = exe.gradient("gn.weight"), r.dbias = exe.gradient("gn.bias");
  write(p.input, r.x2);
  exe.run_inference(s);
  r.y2 = read(p.inference_logits);
  return r;
}

// Every result within its bound: computed in double on the CPU, stored with `store`.
void expect_matches(const std::string& what, const ProgramRun& r, double store) {
  const group_norm_test::Forward f = group_norm_test::forward(r.e, r.x, r.weight, r.bias, r.eps);
  const group_norm_test::Forward f2 = group_norm_test::forward(r.e, r.x2, r.weight, r.bias, r.eps);
  const group_norm_test::Backward b = group_norm_test::backward(r.e, r.x, r.dy, r.weight, r.mean, r.rstd);
  auto check = [&](const char* name, const std::vector<double>& got, const std::vector<double>& want,
                   const group_norm_test::Bound& bound, int ops) {
    ASSERT_EQ(got.size(), want.size()) << what << ": " << name;
    const group_norm_test::Misses m = outside_bound(got, want, bound, store, kDoubleUnit, ops);
    EXPECT_EQ(m.count, 0) << what << ": " << name << " off at " << m.first << ": got "
                          << (m.count ? got[size_t(m.first)] : 0.0) << ", want " << (m.count ? want[size_t(m.first)] : 0.0);
  };
  check("y", r.y, f.y, f.y_bound, 4);
  check("saved mean", r.mean, f.mean, f.mean_bound, 1);
  check("saved rstd", r.rstd, f.rstd, f.rstd_bound, 3);
  check("inference y", r.y2, f2.y, f2.y_bound, 4);
  check("d(input)", r.dx, b.dx, b.dx_bound, 8);
  check("gn.weight's gradient", r.dweight, b.dweight, b.dweight_bound, 3);
  check("gn.bias's gradient", r.dbias, b.dbias, b.dbias_bound, 0);
}

const Extents kMap{2, 30, 8, 4}, kFeatures{2, 1, 240, 6};

TEST(GroupNormProgram, OnAMapInFloat64AndFloat32) {
  expect_matches("fp64", run(on_map(), Precision::FP64, kMap, 1e-3f, 1), kDoubleUnit);
  expect_matches("fp32", run(on_map(), Precision::FP32, kMap, 1e-3f, 2), kFloatUnit);
}

TEST(GroupNormProgram, OnFlatFeaturesInFloat64AndFloat32) {
  expect_matches("fp64", run(on_features(), Precision::FP64, kFeatures, 1e-2f, 3), kDoubleUnit);
  expect_matches("fp32", run(on_features(), Precision::FP32, kFeatures, 1e-2f, 4), kFloatUnit);
}

// The program's check catches a layer that normalized with the other grouping: the same run held
// to the reference of 2 groups instead of 4 fails it.
TEST(GroupNormProgram, TheCheckCatchesAnotherGrouping) {
  ProgramRun r = run(on_map(), Precision::FP64, kMap, 1e-3f, 5);
  r.e.groups = 2;
  const group_norm_test::Forward wrong = group_norm_test::forward(r.e, r.x, r.weight, r.bias, r.eps);
  EXPECT_GT(outside_bound(r.y, wrong.y, wrong.y_bound, kDoubleUnit, kDoubleUnit, 4).count, r.e.elements() / 2);
}

// The tensors of the lowering: PyTorch's names and shapes, the statistics (n x groups, in the
// parameter dtype), no workspace on the CPU; on the GPU a workspace of the layout's floats for each
// op, and in fp16 the fp32 masters read and their fp32 gradients written by the ops themselves.
TEST(GroupNormProgram, TheLoweringsTensors) {
  CompileOptions o;
  o.batch = 2, o.loss = false, o.input_grad = true;
  for (Device device : {Device::CPU, Device::CUDA})
    for (Precision precision : {Precision::FP32, Precision::FP16}) {
      if (device == Device::CPU && precision == Precision::FP16) continue;
      SCOPED_TRACE(std::string(device == Device::CPU ? "cpu " : "cuda ") + precision_name(precision));
      o.device = device, o.precision = precision;
      const Program p = compile(on_map(), o);
      const TensorSpec& w = p.tensors[size_t(p.find("gn.weight"))];
      EXPECT_EQ(w.shape, Shape{8});
      EXPECT_EQ(w.dtype, DType::F32);
      EXPECT_EQ(p.tensors[size_t(p.find("gn.bias"))].shape, Shape{8});
      EXPECT_EQ(p.find("gn.weight:compute"), -1);  // read as the fp32 master
      const TensorSpec& mean = p.tensors[size_t(p.find("gn:saved_mean"))];
      EXPECT_EQ(mean.shape, (Shape{2, 4}));
      EXPECT_EQ(mean.dtype, DType::F32);
      int forwards = 0, backwards = 0;
      for (const std::vector<Op>* list : {&p.forward, &p.inference})
        for (const Op& op : *list) {
          if (op.kind != OpKind::GROUP_NORM_FWD) continue;
          ++forwards;
          const auto f = op_fields<GroupNormForward>(op);
          EXPECT_EQ(f.groups, 4);
          EXPECT_FLOAT_EQ(f.eps, 1e-3f);
          EXPECT_EQ(int(f.weight), p.find("gn.weight"));
          EXPECT_EQ(f.mean.present(), list == &p.forward);  // inference saves nothing
          EXPECT_EQ(f.workspace.present(), device == Device::CUDA);
          if (f.workspace.present()) {
            EXPECT_EQ(numel(p.tensors[size_t(f.workspace)].shape), group_norm_gpu::workspace({2, 30, 8, 4}).floats);
          }
        }
      for (const Op& op : p.backward) {
        if (op.kind != OpKind::GROUP_NORM_BWD) continue;
        ++backwards;
        const auto b = op_fields<GroupNormBackward>(op);
        EXPECT_TRUE(b.dx.present());
        EXPECT_EQ(p.tensors[size_t(b.dweight)].dtype, DType::F32);
        const auto param = std::find(p.params.begin(), p.params.end(), p.find("gn.weight"));
        ASSERT_NE(param, p.params.end());
        EXPECT_EQ(int(b.dweight), p.grads[size_t(param - p.params.begin())]);  // its one gradient
        EXPECT_EQ(b.workspace.present(), device == Device::CUDA);
      }
      EXPECT_EQ(forwards, 2);
      EXPECT_EQ(backwards, 1);
    }
}

// On the data batch (no input gradient wanted) the backward writes no dx but still trains the
// weight and bias; a frozen layer trains nothing and normalizes in training as in inference.
TEST(GroupNormProgram, OnTheDataBatchAndFrozen) {
  CompileOptions o;
  o.batch = 2, o.loss = false;
  {
    const Program p = compile(on_map(), o);
    int backwards = 0;
    for (const Op& op : p.backward) {
      if (op.kind != OpKind::GROUP_NORM_BWD) continue;
      ++backwards;
      const auto b = op_fields<GroupNormBackward>(op);
      EXPECT_FALSE(b.dx.present());
      EXPECT_TRUE(b.dweight.present());
    }
    EXPECT_EQ(backwards, 1);
    EXPECT_EQ(p.params.size(), 2u);
  }
  Blueprint m("frozen");
  m.input(5, 6, 8).group_norm(4, 1e-3f, "gn").conv(4, 3, 1, 1, true, "head");
  o.freeze = "gn";
  const Program p = compile(m, o);
  for (const Op& op : p.backward) EXPECT_NE(op.kind, OpKind::GROUP_NORM_BWD);
  int forwards = 0;
  for (const Op& op : p.forward)
    if (op.kind == OpKind::GROUP_NORM_FWD) {
      ++forwards;
      EXPECT_FALSE(op_fields<GroupNormForward>(op).mean.present());
    }
  EXPECT_EQ(forwards, 1);
  EXPECT_EQ(p.params.size(), 2u);  // the head's weight and bias only
}

// Each op moves each of its tensors once: the forward reads x, weight and bias and writes y and
// the statistics; the backward reads dy, x, weight and the statistics and writes dx and the two
// gradients. The GPU's workspace is not counted.
TEST(GroupNormProgram, CostsCountTheBytesEachOpMoves) {
  CompileOptions o;
  o.batch = 2, o.loss = false, o.input_grad = true;
  for (Device device : {Device::CPU, Device::CUDA}) {
    o.device = device;
    const Program p = compile(on_map(), o);
    const double map = 2 * 30 * 8 * 4, channels = 8 * 4, stats = 2 * 4 * 4;
    int seen = 0;
    auto expect_bytes = [&](const std::vector<Op>& list, OpKind kind, double bytes) {
      for (const Op& op : list) {
        if (op.kind != kind) continue;
        ++seen;
        EXPECT_EQ(op_cost(p, op).bytes, bytes) << op_kind_name(kind);
        EXPECT_EQ(op_cost(p, op).flops, 0);
      }
    };
    expect_bytes(p.forward, OpKind::GROUP_NORM_FWD, 2 * map + 2 * channels + 2 * stats);
    expect_bytes(p.inference, OpKind::GROUP_NORM_FWD, 2 * map + 2 * channels);
    expect_bytes(p.backward, OpKind::GROUP_NORM_BWD, 3 * map + 3 * channels + 2 * stats);
    EXPECT_EQ(seen, 3);
  }
}

TEST(GroupNormRefusals, NameTheLayerTheChannelsAndTheFix) {
  CompileOptions o;
  o.batch = 2;
  {  // groups that do not divide the channels
    Blueprint m("m");
    m.input(6, 6, 3).conv(12, 3, 1, 1, false, "c").group_norm(5, 1e-5f, "features.1.gn").flatten().fc(2);
    expect_error([&] { compile(m, o); }, {"group_norm 'features.1.gn'", "5 groups", "12 channels",
                                          shape_str({2, 6, 6, 12}), "use 4 groups"});
  }
  {  // on flat features too
    Blueprint m("m");
    m.input(2, 2, 3).flatten("flat").group_norm(8, 1e-5f, "gn").fc(2);
    expect_error([&] { compile(m, o); }, {"group_norm 'gn'", "8 groups", "12 channels", "use 6 groups"});
  }
  {  // no groups, and an eps not positive: refused as the layer enters the graph
    Blueprint none("m"), flat_eps("m");
    none.input(4, 4, 4).group_norm(0, 1e-5f, "gn").flatten().fc(2);
    flat_eps.input(4, 4, 4).group_norm(2, 0.f, "gn").flatten().fc(2);
    expect_error([&] { compile(none, o); }, {"gn", "groups must be >= 1"});
    expect_error([&] { compile(flat_eps, o); }, {"gn", "eps must be finite and positive"});
  }
}

}  // namespace
}  // namespace kiln
