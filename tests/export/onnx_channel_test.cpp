// ONNX export of ShuffleNetV2's data movement (issue 49): channel_shuffle as Reshape to (N, g, C / g,
// H, W), Transpose(0, 2, 1, 3, 4) and Reshape back, channel_slice as Slice on axis 1, their shapes and
// ranges int64 tensors from Constant nodes. Models with two stride-1 units (torchvision's branch2,
// BatchNorms folded and kept, compiled fused and unfused), slices of flat rows, and the identities
// (no node); onnxruntime must give kiln's logits, and the bound must catch a wrong permutation: kiln's
// logits of the same weights with the second unit's shuffle inverted land far above it.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/export.h"
#include "kiln/torch_weights.h"
#include "onnx_runner.h"
#include "ops/channel/shufflenet_unit_test.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

// onnx_export_test.cpp's bound for BatchNorm statistics drawn at random (randomize_batch_norms),
// which the other layer families' ONNX checks hold too.
constexpr double kBound = 5e-5;


// A stem, a unit shuffling 2 groups and one shuffling `second_groups` of 16 channels, the mean, a
// linear layer.
Blueprint units(int second_groups) {
  Blueprint m("units");
  m.input(8, 7, 3).conv(16, 3, 1, 1, false, "conv1.0").bn("conv1.1").relu("conv1.2");
  channel_test::shufflenet_unit(m, "stage2.0", 16, 2);
  channel_test::shufflenet_unit(m, "stage2.1", 16, second_groups);
  m.global_avgpool("mean").fc(5, true, "fc");
  return m;
}

// Two slices side by side of flattened rows and one overlapping both, each read by a linear layer.
Blueprint flat_slices() {
  Blueprint m("flat_slices");
  m.input(4, 4, 3).conv(4, 3, 1, 1, true, "conv").flatten("flat");
  const Blueprint::Ref flat = m.last();
  m.channel_slice(0, 24, "s1").fc(6, true, "f1");
  const Blueprint::Ref f1 = m.last();
  m.from(flat).channel_slice(24, 40, "s2").fc(6, true, "f2");
  const Blueprint::Ref f2 = m.last();
  m.from(flat).channel_slice(10, 20, "s3").fc(6, true, "f3");
  const Blueprint::Ref f3 = m.last();
  m.add(f1, f2, "sum").add(m.last(), f3, "sum2").relu("act").fc(5, true, "head");
  return m;
}

// A shuffle of 1 group, one of a group per channel and a slice of every channel: no node at all.
Blueprint identities() {
  Blueprint m("identities");
  m.input(5, 5, 3).conv(6, 3, 1, 1, true, "conv").channel_shuffle(1, "one_group");
  m.channel_shuffle(6, "per_channel").channel_slice(0, 6, "every_channel");
  m.global_avgpool("pool").fc(4, true, "head");
  return m;
}

struct Case {
  std::string name;
  Blueprint model;
  bool fuse = true;
};

struct Exported {
  std::unique_ptr<Executable> exe;
  std::vector<float> x, kiln;
  Shape shape;  // NCHW
};

Exported exported(const Case& c, uint32_t seed, const testing::TempDir& dir, std::vector<testing::OnnxRun>& runs) {
  CompileOptions o;
  o.batch = 3, o.fuse_cbr = c.fuse;
  Exported e;
  e.exe = std::make_unique<Executable>(compile(c.model, o), seed);
  testing::randomize_batch_norms(*e.exe, seed + 1);
  const Shape& in = e.exe->program().tensors[e.exe->program().input].shape;
  e.shape = {in[0], in[3], in[1], in[2]};
  e.x = testing::normal_floats(size_t(numel(e.shape)), seed + 2);
  e.kiln = testing::kiln_logits(*e.exe, e.x, e.shape);
  for (bool fold : {true, false}) {
    OnnxExportOptions options;
    options.fold_bn = fold;
    const std::string file = dir.file(fmt::format("{}.{}.onnx", c.name, fold ? "folded" : "kept"));
    export_onnx(*e.exe, file, options);
    runs.push_back({file, e.x, e.shape, nullptr, {}, {}});
  }
  return e;
}

TEST(OnnxChannel, OnnxruntimeGivesKilnsLogits) {
  const std::vector<Case> cases = {{"units_fused", units(4), true},
                                   {"units_unfused", units(4), false},
                                   {"units_shuffle_2", units(2), true},
                                   {"flat_slices", flat_slices(), true},
                                   {"identities", identities(), true}};
  testing::TempDir dir;
  std::vector<testing::OnnxRun> runs;
  std::vector<Exported> all;
  for (size_t i = 0; i < cases.size(); ++i) all.push_back(exported(cases[i], 20 + uint32_t(i), dir, runs));
  ASSERT_FALSE(::testing::Test::HasFailure());
  testing::run_onnx(runs, dir.path());
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (size_t i = 0; i < runs.size(); ++i) {
    const double gap = testing::logit_gap(runs[i].logits, all[i / 2].kiln);
    EXPECT_LT(gap, kBound) << runs[i].model;
    std::printf("%s: gap %.2e\n", std::filesystem::path(runs[i].model).filename().c_str(), gap);
  }
  // What each file holds: two Slice nodes a unit, three nodes a shuffle, none for an identity.
  const nlohmann::json& unit_ops = runs[0].report["ops"];
  EXPECT_EQ(unit_ops.value("Slice", 0), 4) << unit_ops.dump();
  EXPECT_EQ(unit_ops.value("Transpose", 0), 2) << unit_ops.dump();
  EXPECT_EQ(unit_ops.value("Reshape", 0), 4) << unit_ops.dump();
  EXPECT_EQ(runs[6].report["ops"].value("Slice", 0), 3) << runs[6].report["ops"].dump();
  const nlohmann::json& identity_ops = runs[8].report["ops"];
  for (const char* op : {"Slice", "Transpose", "Reshape", "Constant"})
    EXPECT_EQ(identity_ops.value(op, 0), 0) << op << ": " << identity_ops.dump();

  // The bound catches a wrong permutation: kiln's logits with the second unit's shuffle in 8 groups
  // instead of 4, the same weights and statistics moved across through a state_dict.
  CompileOptions o;
  o.batch = 3;
  Executable wrong(compile(units(8), o), 1);
  const std::string state = dir.file("units_fused.safetensors");
  export_torch_weights(*all[0].exe, state);
  load_torch_weights(wrong, state);
  const double wrong_gap = testing::logit_gap(runs[0].logits, testing::kiln_logits(wrong, all[0].x, all[0].shape));
  std::printf("the second shuffle in 8 groups: gap %.2e\n", wrong_gap);
  EXPECT_GT(wrong_gap, 20 * kBound);
}

}  // namespace
}  // namespace kiln
