// The channel family in compiled programs, forward, backward and inference, in float64 and float32:
// two ShuffleNetV2 stride-1 units in a row (x.chunk(2, dim=1), a branch on the second half, cat,
// channel_shuffle) with every gradient, and slices that do or do not lie side by side, against
// float64 loops (channel_test_reference.h). The values are multiples of 1/16 and small integers, so
// every sum is exact in float32 and each result is compared for equality. Then which ops the
// backward runs (a chunk's gradient written once, no GRAD_SUM), the identities, the costs and the
// refusals of shape inference.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/channel/channel_contract.h"
#include "ops/channel/channel_test_reference.h"
#include "runtime/op_cost.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using channel_test::Values;
using testing::expect_error;

// Multiples of `step` drawn uniformly from [lo, hi) (a grid the float formats hold exactly).
Values grid(size_t n, uint32_t seed, int lo, int hi, double step) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi - 1);
  Values v(n);
  for (double& e : v) e = d(rng) * step;
  return v;
}

// Inputs and output gradients: multiples of 1/8 in [-4, 4).
Values eighths(size_t n, uint32_t seed) { return grid(n, seed, -32, 32, 1.0 / 8); }

// Every element equal (the sums are exact, see the file's comment).
void expect_same(const std::string& what, const Values& got, const Values& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t misses = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i)
    if (!(got[i] == want[i]) && misses++ == 0) first = int64_t(i);
  EXPECT_EQ(misses, 0) << what << ": " << misses << " elements differ from the reference, first at " << first << " ("
                       << (first < 0 ? 0.0 : got[size_t(first)]) << " for " << (first < 0 ? 0.0 : want[size_t(first)])
                       << ")";
}

// One forward, backward and inference (on other inputs) of a program without a loss whose input
// wants its gradient, in T, with the named parameters set.
struct ProgramRun {
  Values x, dy, y, dx, x2, yi;
  std::map<std::string, Values> grads;  // of every parameter set
};

template <class T>
ProgramRun run(const Blueprint& model, const std::map<std::string, Values>& params, uint32_t seed) {
  CompileOptions o;
  o.precision = sizeof(T) == 8 ? Precision::FP64 : Precision::FP32;
  o.batch = 2, o.loss = false, o.input_grad = true;
  Executable exe(compile(model, o), 1);
  const Program& p = exe.program();
  auto write = [&](int id, const Values& v) {
    const std::vector<T> t(v.begin(), v.end());
    exe.write(id, t.data(), t.size() * sizeof(T));
  };
  auto read = [&](int id) {
    const std::vector<T> t = exe.read<T>(id);
    return Values(t.begin(), t.end());
  };
  for (const auto& [name, values] : params) write(exe.id(name), values);
  ProgramRun r;
  r.x = eighths(size_t(numel(p.tensors[p.input].shape)), seed);
  r.dy = eighths(size_t(numel(p.tensors[p.logits].shape)), seed + 1);
  r.x2 = eighths(r.x.size(), seed + 2);
  write(p.input, r.x);
  write(p.output_grad, r.dy);
  const StepScalars s{0.f, 0, 1};
  exe.run_forward(s);
  r.y = read(p.logits);
  exe.run_backward(s);
  r.dx = read(p.input_grad);
  for (const auto& [name, values] : params) r.grads[name] = exe.gradient(name);
  write(p.input, r.x2);
  exe.run_inference(s);
  r.yi = read(p.inference_logits);
  return r;
}

int count(const std::vector<Op>& ops, OpKind kind) {
  int n = 0;
  for (const Op& op : ops) n += op.kind == kind;
  return n;
}

Program compiled(const Blueprint& model) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 2, o.loss = false, o.input_grad = true;
  return compile(model, o);
}

// --- Two ShuffleNetV2 stride-1 units ---

constexpr int64_t kRows = 2 * 3 * 4, kChannels = 8, kHalf = 4;

// torchvision's InvertedResidual with stride 1: x1, x2 = x.chunk(2, dim=1); cat(x1, branch2(x2));
// channel_shuffle(out, groups). The branch is a biased 1x1 convolution and a ReLU, whose loops are
// short (the real branch, BatchNorms included, is in GradCheck.ShuffleNetV2Units).
void unit(Blueprint& m, const std::string& name, int groups) {
  const Blueprint::Ref x = m.last();
  m.channel_slice(0, kHalf, name + ".x1");
  const Blueprint::Ref x1 = m.last();
  m.from(x).channel_slice(kHalf, kHalf, name + ".x2");
  m.conv(kHalf, 1, 1, 0, true, name + ".branch.0").relu(name + ".branch.1");
  m.concat({x1, m.last()}, name + ".cat").channel_shuffle(groups, name + ".shuffle");
}

// The second unit shuffles 4 groups of 2 channels (ShuffleNetV2's 2 groups in the first).
Blueprint two_units() {
  Blueprint m("units");
  m.input(3, 4, int(kChannels));
  unit(m, "u1", 2);
  unit(m, "u2", 4);
  return m;
}

// A unit's convolution: small integer weights [out][in] and odd multiples of 1/16 as biases, so that
// no pre-activation is 0 (where ReLU's gradient would be a convention) and every sum is exact.
struct Branch {
  Values w, b;
};
Branch branch(uint32_t seed) {
  Values b = grid(size_t(kHalf), seed + 1, -8, 8, 1.0 / 8);
  for (double& e : b) e += 1.0 / 16;
  return {grid(size_t(kHalf * kHalf), seed, -2, 3, 1.0), b};
}

struct UnitTrace {
  Values x2, pre;  // the second half, and the convolution's output before its ReLU
};

Values unit_forward(const Values& x, int64_t groups, const Branch& br, UnitTrace& t) {
  const Values x1 = channel_test::slice(x, kRows, kChannels, 0, kHalf);
  t.x2 = channel_test::slice(x, kRows, kChannels, kHalf, kHalf);
  t.pre.assign(size_t(kRows * kHalf), 0.0);
  Values out(t.pre.size());
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t k = 0; k < kHalf; ++k) {
      double s = br.b[size_t(k)];
      for (int64_t c = 0; c < kHalf; ++c) s += br.w[size_t(k * kHalf + c)] * t.x2[size_t(r * kHalf + c)];
      t.pre[size_t(r * kHalf + k)] = s;
      out[size_t(r * kHalf + k)] = s > 0 ? s : 0;
    }
  return channel_test::shuffle(channel_test::cat({x1, out}, {kHalf, kHalf}, kRows), kRows, kChannels, groups);
}

// Returns the unit's input gradient; dw and db receive its convolution's.
Values unit_backward(const Values& dy, int64_t groups, const Branch& br, const UnitTrace& t, Values& dw, Values& db) {
  const Values dcat = channel_test::unshuffle(dy, kRows, kChannels, groups);
  const Values dx1 = channel_test::slice(dcat, kRows, kChannels, 0, kHalf);
  Values dpre = channel_test::slice(dcat, kRows, kChannels, kHalf, kHalf);
  for (size_t i = 0; i < dpre.size(); ++i) dpre[i] = t.pre[i] > 0 ? dpre[i] : 0;
  dw.assign(size_t(kHalf * kHalf), 0.0);
  db.assign(size_t(kHalf), 0.0);
  Values dx2(size_t(kRows * kHalf), 0.0);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t k = 0; k < kHalf; ++k) {
      const double g = dpre[size_t(r * kHalf + k)];
      db[size_t(k)] += g;
      for (int64_t c = 0; c < kHalf; ++c) {
        dw[size_t(k * kHalf + c)] += g * t.x2[size_t(r * kHalf + c)];
        dx2[size_t(r * kHalf + c)] += br.w[size_t(k * kHalf + c)] * g;
      }
    }
  Values dx(size_t(kRows * kChannels), 0.0);
  channel_test::add_slice_gradient(dx, dx1, kRows, kChannels, 0, kHalf);
  channel_test::add_slice_gradient(dx, dx2, kRows, kChannels, kHalf, kHalf);
  return dx;
}

struct UnitsReference {
  Values y, dx, yi;
  std::map<std::string, Values> grads;
};

UnitsReference units_reference(const ProgramRun& r, const Branch& b1, const Branch& b2) {
  UnitsReference want;
  UnitTrace t1, t2, ti;
  want.y = unit_forward(unit_forward(r.x, 2, b1, t1), 4, b2, t2);
  want.yi = unit_forward(unit_forward(r.x2, 2, b1, ti), 4, b2, ti);
  Values dw1, db1, dw2, db2;
  const Values d_mid = unit_backward(r.dy, 4, b2, t2, dw2, db2);
  want.dx = unit_backward(d_mid, 2, b1, t1, dw1, db1);
  want.grads = {{"u1.branch.0.weight", dw1}, {"u1.branch.0.bias", db1}, {"u2.branch.0.weight", dw2},
                {"u2.branch.0.bias", db2}};
  return want;
}

void expect_units_match(const std::string& what, const ProgramRun& got, const UnitsReference& want) {
  expect_same(what + " y", got.y, want.y);
  expect_same(what + " inference y", got.yi, want.yi);
  expect_same(what + " d(input)", got.dx, want.dx);
  for (const auto& [name, values] : want.grads) expect_same(what + " " + name, got.grads.at(name), values);
}

template <class T>
void check_two_units(const std::string& what) {
  const Branch b1 = branch(10), b2 = branch(20);
  const std::map<std::string, Values> params = {{"u1.branch.0.weight", b1.w}, {"u1.branch.0.bias", b1.b},
                                                {"u2.branch.0.weight", b2.w}, {"u2.branch.0.bias", b2.b}};
  const ProgramRun got = run<T>(two_units(), params, 30);
  expect_units_match(what, got, units_reference(got, b1, b2));
}

TEST(ChannelProgram, TwoShuffleNetUnitsInFloat64) { check_two_units<double>("fp64"); }
TEST(ChannelProgram, TwoShuffleNetUnitsInFloat32) { check_two_units<float>("fp32"); }

// The checks catch plausible wrong programs: halves of the chunk swapped in the input's gradient,
// and the second unit shuffled in 2 groups instead of 4.
TEST(ChannelProgram, TheUnitChecksCatchWrongRouting) {
  const Branch b1 = branch(10), b2 = branch(20);
  const std::map<std::string, Values> params = {{"u1.branch.0.weight", b1.w}, {"u1.branch.0.bias", b1.b},
                                                {"u2.branch.0.weight", b2.w}, {"u2.branch.0.bias", b2.b}};
  ProgramRun got = run<double>(two_units(), params, 31);
  const UnitsReference want = units_reference(got, b1, b2);
  ProgramRun swapped = got;
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t k = 0; k < kHalf; ++k)
      std::swap(swapped.dx[size_t(r * kChannels + k)], swapped.dx[size_t(r * kChannels + kHalf + k)]);
  EXPECT_NONFATAL_FAILURE(expect_units_match("halves swapped", swapped, want), "d(input)");
  UnitTrace t1, t2;
  ProgramRun two_groups = got;
  two_groups.y = unit_forward(unit_forward(got.x, 2, b1, t1), 2, b2, t2);
  EXPECT_NONFATAL_FAILURE(expect_units_match("2 groups", two_groups, want), "2 groups y");
}

// Each chunk's gradient is written once, by one CHANNEL_SLICE_BWD of its first half's layer reading
// both halves' gradients: no slot of the input's size per half and no GRAD_SUM.
TEST(ChannelProgram, AChunksGradientIsWrittenOnce) {
  const Program p = compiled(two_units());
  EXPECT_EQ(count(p.forward, OpKind::CHANNEL_SLICE_FWD), 4);
  EXPECT_EQ(count(p.inference, OpKind::CHANNEL_SLICE_FWD), 4);
  EXPECT_EQ(count(p.forward, OpKind::CHANNEL_SHUFFLE_FWD), 2);
  EXPECT_EQ(count(p.inference, OpKind::CHANNEL_SHUFFLE_FWD), 2);
  EXPECT_EQ(count(p.backward, OpKind::CHANNEL_SHUFFLE_BWD), 2);
  EXPECT_EQ(count(p.backward, OpKind::GRAD_SUM), 0);
  std::vector<std::string> writers, written;
  for (const Op& op : p.backward) {
    if (op.kind != OpKind::CHANNEL_SLICE_BWD) continue;
    const auto f = op_fields<ChannelSliceBackward>(op);
    writers.push_back(p.layer_of(op).name);
    written.push_back(p.tensors[size_t(int(f.dx))].name);
    EXPECT_EQ(f.start, 0);
    ASSERT_EQ(f.dys.size(), 2u);
    EXPECT_EQ(p.tensors[size_t(int(f.dys[0]))].name, "d:" + p.layer_of(op).name);  // x1's, then x2's
    EXPECT_EQ(p.tensors[size_t(int(f.dys[1]))].shape, (Shape{2, 3, 4, kHalf}));
  }
  EXPECT_EQ(writers, (std::vector<std::string>{"u2.x1", "u1.x1"}));
  ASSERT_EQ(written.size(), 2u);
  EXPECT_EQ(written[0], "d:u1.shuffle");
  EXPECT_EQ(p.tensors[size_t(p.input_grad)].name, written[1]);
}

// --- Slices that do or do not lie side by side ---

// y = slice(x, a, count) + slice(x, b, count), of an NHWC map (2 x 3 x 6) or of its flattened rows
// (2 x 36); x's gradient is dy in both ranges (added where they overlap), 0 elsewhere.
Blueprint two_slices_added(int a, int b, int count, bool flat) {
  Blueprint m("two_slices");
  m.input(2, 3, 6);
  if (flat) m.flatten("flat");
  const Blueprint::Ref x = m.last();
  m.channel_slice(a, count, "s1");
  const Blueprint::Ref s1 = m.last();
  m.from(x).channel_slice(b, count, "s2");
  m.add(s1, m.last(), "sum");
  return m;
}

struct TwoSlices {
  int a, b, count;
  bool flat;
  int run_start;  // -1: not a run (overlap or gap), each slice writes its own slot and GRAD_SUM adds
};

void check_two_slices(const TwoSlices& c) {
  const std::string what = "slices [" + std::to_string(c.a) + ", +" + std::to_string(c.count) + ") and [" +
                           std::to_string(c.b) + ", +" + std::to_string(c.count) + ")" + (c.flat ? " of flat rows" : "");
  SCOPED_TRACE(what);
  const Blueprint model = two_slices_added(c.a, c.b, c.count, c.flat);
  const int64_t rows = c.flat ? 2 : 12, channels = c.flat ? 36 : 6;
  for (bool fp64 : {true, false}) {
    const ProgramRun got = fp64 ? run<double>(model, {}, 40) : run<float>(model, {}, 40);
    Values y = channel_test::slice(got.x, rows, channels, c.a, c.count),
           yi = channel_test::slice(got.x2, rows, channels, c.a, c.count);
    const Values y2 = channel_test::slice(got.x, rows, channels, c.b, c.count),
                 yi2 = channel_test::slice(got.x2, rows, channels, c.b, c.count);
    for (size_t i = 0; i < y.size(); ++i) y[i] += y2[i], yi[i] += yi2[i];
    Values dx(got.x.size(), 0.0);
    channel_test::add_slice_gradient(dx, got.dy, rows, channels, c.a, c.count);
    channel_test::add_slice_gradient(dx, got.dy, rows, channels, c.b, c.count);
    expect_same(fp64 ? "fp64 y" : "fp32 y", got.y, y);
    expect_same(fp64 ? "fp64 inference y" : "fp32 inference y", got.yi, yi);
    expect_same(fp64 ? "fp64 d(input)" : "fp32 d(input)", got.dx, dx);
  }
  const Program p = compiled(model);
  std::vector<int> starts, parts;
  for (const Op& op : p.backward)
    if (op.kind == OpKind::CHANNEL_SLICE_BWD) {
      const auto f = op_fields<ChannelSliceBackward>(op);
      starts.push_back(f.start), parts.push_back(int(f.dys.size()));
      EXPECT_EQ(p.tensors[size_t(int(f.dx))].shape, p.tensors[size_t(p.find(c.flat ? "flat" : "input"))].shape);
    }
  if (c.run_start >= 0) {
    EXPECT_EQ(starts, std::vector<int>{c.run_start});
    EXPECT_EQ(parts, std::vector<int>{2});
    EXPECT_EQ(count(p.backward, OpKind::GRAD_SUM), 0);
  } else {
    EXPECT_EQ(starts, (std::vector<int>{c.b, c.a}));  // s2's backward is lowered first
    EXPECT_EQ(parts, (std::vector<int>{1, 1}));
    EXPECT_EQ(count(p.backward, OpKind::GRAD_SUM), 1);
  }
}

TEST(ChannelProgram, ARunOfSlicesInsideTheChannelsIsWrittenOnce) {
  check_two_slices({1, 3, 2, false, 1});   // channels [1, 5) of 6: zeros in 0 and 5
  check_two_slices({3, 1, 2, false, 1});   // the same run, the slices in the other order
  check_two_slices({10, 22, 12, true, 10});  // flat rows: [10, 34) of 36
}

TEST(ChannelProgram, OverlappingSlicesAndGapsAddTheirSlots) {
  check_two_slices({0, 1, 3, false, -1});   // overlapping: channels 1 and 2 get both gradients
  check_two_slices({0, 3, 2, false, -1});   // a gap at channel 2
  check_two_slices({0, 20, 12, true, -1});  // flat rows with a gap
}

// A chunk's halves and the whole input read by a concat as well: every reader gets its slot, the
// slices' zeros outside their channels, and GRAD_SUM adds the three.
TEST(ChannelProgram, SlicesBesideAnotherReaderAddTheirSlots) {
  Blueprint m("mixed");
  m.input(2, 3, 6);
  m.channel_slice(0, 3, "lo");
  const Blueprint::Ref lo = m.last();
  m.from(m.source()).channel_slice(3, 3, "hi");
  m.concat({m.last(), lo, m.source()}, "cat");
  for (bool fp64 : {true, false}) {
    const ProgramRun got = fp64 ? run<double>(m, {}, 50) : run<float>(m, {}, 50);
    const int64_t rows = 12;
    const Values want_y = channel_test::cat({channel_test::slice(got.x, rows, 6, 3, 3),
                                             channel_test::slice(got.x, rows, 6, 0, 3), got.x},
                                            {3, 3, 6}, rows);
    Values dx(got.x.size(), 0.0);
    channel_test::add_slice_gradient(dx, channel_test::slice(got.dy, rows, 12, 0, 3), rows, 6, 3, 3);
    channel_test::add_slice_gradient(dx, channel_test::slice(got.dy, rows, 12, 3, 3), rows, 6, 0, 3);
    channel_test::add_slice_gradient(dx, channel_test::slice(got.dy, rows, 12, 6, 6), rows, 6, 0, 6);
    expect_same(fp64 ? "fp64 y" : "fp32 y", got.y, want_y);
    expect_same(fp64 ? "fp64 d(input)" : "fp32 d(input)", got.dx, dx);
  }
  const Program p = compiled(m);
  EXPECT_EQ(count(p.backward, OpKind::CHANNEL_SLICE_BWD), 2);
  EXPECT_EQ(count(p.backward, OpKind::GRAD_SUM), 1);
}

// A shuffle of 1 group or of one channel a group, and a slice of every channel, move nothing: no op
// runs, each output is its input under the layer's name, and the input's gradient is dy's bytes.
TEST(ChannelProgram, IdentitiesRunNoOp) {
  Blueprint m("identities");
  m.input(2, 3, 6).channel_shuffle(1, "one_group").channel_shuffle(6, "one_channel_each");
  m.channel_slice(0, 6, "every_channel");
  const Program p = compiled(m);
  for (const std::vector<Op>* list : {&p.forward, &p.backward, &p.inference}) EXPECT_TRUE(list->empty());
  for (const char* name : {"one_group", "one_channel_each", "every_channel"}) EXPECT_GE(p.find(name), 0) << name;
  const ProgramRun got = run<double>(m, {}, 60);
  expect_same("y", got.y, got.x);
  expect_same("inference y", got.yi, got.x2);
  expect_same("d(input)", got.dx, got.dy);
}

TEST(ChannelProgram, CostsCountTheBytesEachOpMoves) {
  CompileOptions o;
  o.batch = 2, o.loss = false, o.input_grad = true;
  const Program p = compile(two_units(), o);
  const double map = double(kRows * kChannels * sizeof(float)), half = map / 2;
  // Each op kind's bytes: a slice reads its channels of x and writes y; a chunk's gradient reads both
  // halves' gradients and writes dx; a shuffle reads and writes one map.
  const std::map<OpKind, double> want = {{OpKind::CHANNEL_SLICE_FWD, 2 * half},
                                         {OpKind::CHANNEL_SLICE_BWD, 2 * map},
                                         {OpKind::CHANNEL_SHUFFLE_FWD, 2 * map},
                                         {OpKind::CHANNEL_SHUFFLE_BWD, 2 * map}};
  int seen = 0;
  for (const std::vector<Op>* list : {&p.forward, &p.backward})
    for (const Op& op : *list) {
      const auto it = want.find(op.kind);
      if (it == want.end()) continue;
      const OpCost cost = op_cost(p, op);
      EXPECT_EQ(cost.bytes, it->second) << op_kind_name(op.kind);
      EXPECT_EQ(cost.flops, 0) << op_kind_name(op.kind);
      ++seen;
    }
  EXPECT_EQ(seen, 4 + 2 + 2 + 2);
}

TEST(ChannelRefusals, NameTheLayerTheShapeAndTheFix) {
  CompileOptions o;
  o.batch = 2;
  auto model = [](auto&& add_layer) {
    Blueprint m("m");
    m.input(4, 4, 3).conv(8, 3, 1, 1, false, "c");
    add_layer(m);
    m.flatten().fc(2);
    return m;
  };
  expect_error([&] { compile(model([](Blueprint& m) { m.channel_shuffle(3, "shuffle"); }), o); },
               {"channel_shuffle 'shuffle'", shape_str({2, 4, 4, 8}), "8 channels", "3 groups", "divides 8"});
  expect_error([&] { compile(model([](Blueprint& m) { m.flatten("flat").channel_shuffle(2, "shuffle"); }), o); },
               {"channel_shuffle 'shuffle'", shape_str({2, 128}), "feature map", "before flatten"});
  expect_error([&] { compile(model([](Blueprint& m) { m.channel_slice(6, 4, "half"); }), o); },
               {"channel_slice 'half'", "[6, 10)", "8 channels", shape_str({2, 4, 4, 8}),
                "take at most 2 channels from channel 6"});
  expect_error([&] { compile(model([](Blueprint& m) { m.channel_slice(8, 1, "past"); }), o); },
               {"channel_slice 'past'", "[8, 9)", "start below channel 8"});
  expect_error([&] { compile(model([](Blueprint& m) { m.flatten("flat").channel_slice(100, 40, "rows"); }), o); },
               {"channel_slice 'rows'", "[100, 140)", "128 channels", "take at most 28 channels from channel 100"});
  // The attributes' own checks (kiln/layer_kind_attrs.h), as the layer enters the graph.
  expect_error([&] { compile(model([](Blueprint& m) { m.channel_shuffle(0, "none"); }), o); },
               {"none", "groups must be >= 1"});
  expect_error([&] { compile(model([](Blueprint& m) { m.channel_slice(-1, 2, "neg"); }), o); },
               {"neg", "first channel must be >= 0"});
}

}  // namespace
}  // namespace kiln
