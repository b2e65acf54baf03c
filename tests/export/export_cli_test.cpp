// kiln export through the command line: a digits CNN trained for one epoch, exported as ONNX (BN
// folded and kept) and as a PyTorch state_dict; onnxruntime on the test split, normalized as the
// file's metadata says, gets the top-1 accuracy `kiln eval` reports, and the state_dict loads back to
// the same logits. Then the refusals: a missing checkpoint, an existing output, the checkpoint as
// output, no output, an unknown option.
#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/checkpoint.h"
#include "kiln/compile.h"
#include "kiln/data.h"
#include "kiln/torch_weights.h"
#include "kiln/zoo.h"
#include "onnx_runner.h"
#include "support/kiln_cli.h"
#include "support/program_fixture.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

using testing::kiln;
using testing::Result;

// onnx_export_test.cpp says why: 5e-5 is its bound for statistics drawn at random (these models are
// small, and their gaps measured 1e-7 to 5e-7); with statistics calibrated to the batch it takes 1e-4.
constexpr double kBound = 5e-5;

// The first `train` and `test` digits, trained on for one epoch: the checkpoint.
std::string train_digits(const testing::TempDir& dir, uint32_t train, uint32_t test) {
  const std::string data = dir.file("digits"), ck = dir.file("digits.safetensors");
  testing::write_first_digits(testing::shared_digits_dir(), data, train, test);
  const Result r = kiln(fmt::format("train --model digits_cnn --device cpu --data {} --epochs 1 --batch 64 --lr 0.05 "
                                    "--workers 1 --seed 3 --checkpoint {}", data, ck));
  EXPECT_EQ(r.rc, 0) << r.output;
  return ck;
}

std::vector<float> floats_of(const std::string& text) {
  std::vector<float> v;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    v.push_back(std::stof(text.substr(start, comma - start)));
    start = comma + 1;
  }
  return v;
}

int64_t top1_hits(const std::vector<float>& logits, const std::vector<int32_t>& labels, int classes) {
  int64_t hits = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const float* row = logits.data() + i * classes;
    hits += std::max_element(row, row + classes) - row == labels[i];
  }
  return hits;
}

TEST(ExportCli, OnnxruntimeScoresAsKilnEvalAndTheStateDictLoadsBack) {
  testing::TempDir dir;
  const std::string ck = train_digits(dir, 1000, 1000), data = dir.file("digits");
  ASSERT_FALSE(::testing::Test::HasFailure());
  const Result eval = kiln(fmt::format("eval --checkpoint {} --data {} --device cpu", ck, data));
  ASSERT_EQ(eval.rc, 0) << eval.output;
  const double accuracy = testing::test_accuracy(eval);
  ASSERT_GT(accuracy, 0.5) << "one epoch should learn something; a constant answer would match trivially";

  const std::string folded = dir.file("digits.onnx"), kept = dir.file("digits_kept.onnx"),
                    torch = dir.file("digits_torch.safetensors");
  const Result exported = kiln(fmt::format("export --checkpoint {} --onnx {} --torch {}", ck, folded, torch));
  ASSERT_EQ(exported.rc, 0) << exported.output;
  testing::expect_contains(exported,
                           {"wrote " + folded, "ONNX opset 17", "input [N,1,20,20], logits [N,10]", "4 Conv",
                            "BatchNorm folded into the convolutions", "wrote " + torch, "24 tensors"},
                           "export");
  const Result kept_run = kiln(fmt::format("export -c {} --onnx {} --keep-bn", ck, kept));
  ASSERT_EQ(kept_run.rc, 0) << kept_run.output;
  testing::expect_contains(kept_run, {"4 BatchNormalization", "BatchNorm kept"}, "--keep-bn");

  // The test split as a user of the ONNX file prepares it: (pixel / 255 - norm_mean) / norm_std,
  // from the checkpoint's metadata (the file's must say the same), in kiln's arithmetic.
  const std::map<std::string, std::string> meta = load_safetensors(ck).metadata;
  const float mean = floats_of(meta.at("norm_mean")).at(0), std = floats_of(meta.at("norm_std")).at(0);
  const Dataset test = load_dataset(data, "idx", false);
  ASSERT_EQ(test.count, 1000);
  std::vector<float> x(test.images.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(test.images[i]) * (1.0f / (255.0f * std)) + (-mean / std);
  const Shape shape = {test.count, 1, 20, 20};  // one channel: NHWC and NCHW hold the same order
  std::vector<testing::OnnxRun> runs = {{folded, x, shape, nullptr, {}, {}}, {kept, x, shape, nullptr, {}, {}}};
  testing::run_onnx(runs, dir.path());
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (const testing::OnnxRun& run : runs) {
    EXPECT_EQ(top1_hits(run.logits, test.labels, 10), std::llround(accuracy * 1000)) << run.model << "\n" << eval.output;
    EXPECT_EQ(run.report["metadata"]["norm_mean"], meta.at("norm_mean"));
    EXPECT_EQ(run.report["metadata"]["norm_std"], meta.at("norm_std"));
    EXPECT_EQ(run.report["metadata"]["model"], "digits_cnn");
  }
  EXPECT_LT(testing::logit_gap(runs[1].logits, runs[0].logits), kBound) << "folded and kept BN disagree";

  // The state_dict in a fresh program gives onnxruntime's logits too.
  CompileOptions o;
  o.batch = int(test.count);
  Executable exe(compile(zoo::digits_cnn(), o), 77);
  EXPECT_EQ(load_torch_weights(exe, torch).tensors, 24);
  EXPECT_LT(testing::logit_gap(testing::kiln_logits(exe, x, shape), runs[0].logits), kBound);
}

TEST(ExportCli, RefusalsNameTheCulpritAndWriteNothing) {
  testing::TempDir dir;
  const std::string ck = train_digits(dir, 256, 64), onnx = dir.file("m.onnx");
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::vector<uint8_t> ck_bytes = testing::read_bytes(ck);

  const Result missing = kiln(fmt::format("export --checkpoint {} --onnx {}", dir.file("none.safetensors"), onnx));
  EXPECT_EQ(missing.rc, 2);
  testing::expect_contains(missing, {fmt::format("checkpoint '{}' does not exist", dir.file("none.safetensors"))},
                           "missing");
  EXPECT_FALSE(std::filesystem::exists(onnx));

  testing::write_bytes(onnx, {7, 7, 7});
  const Result exists = kiln(fmt::format("export --checkpoint {} --onnx {}", ck, onnx));
  EXPECT_EQ(exists.rc, 2);
  testing::expect_contains(exists, {"'" + onnx + "' already exists", "--overwrite", "left as it was"}, "exists");
  EXPECT_EQ(testing::read_bytes(onnx), std::vector<uint8_t>({7, 7, 7}));
  const Result overwritten = kiln(fmt::format("export --checkpoint {} --onnx {} --overwrite", ck, onnx));
  EXPECT_EQ(overwritten.rc, 0) << overwritten.output;
  EXPECT_GT(std::filesystem::file_size(onnx), 100000u);

  const Result itself = kiln(fmt::format("export --checkpoint {} --torch {} --overwrite", ck, ck));
  EXPECT_EQ(itself.rc, 2);
  testing::expect_contains(itself, {"is the checkpoint being exported"}, "the checkpoint as output");
  EXPECT_EQ(testing::read_bytes(ck), ck_bytes);

  const Result nothing = kiln(fmt::format("export --checkpoint {}", ck));
  EXPECT_EQ(nothing.rc, 2);
  testing::expect_contains(nothing, {"needs something to write: --onnx FILE", "--torch"}, "no output");

  const Result typo = kiln(fmt::format("export --checkpoint {} --onxx {}", ck, dir.file("typo.onnx")));
  EXPECT_NE(typo.rc, 0);
  testing::expect_contains(typo, {"unknown option '--onxx' (did you mean '--onnx'?)"}, "a typo");
  EXPECT_FALSE(std::filesystem::exists(dir.file("typo.onnx")));

  // A file that is not a kiln checkpoint (a state_dict) is refused naming what it lacks.
  const std::string torch = dir.file("t.safetensors");
  ASSERT_EQ(kiln(fmt::format("export -c {} --torch {}", ck, torch)).rc, 0);
  const Result not_kiln = kiln(fmt::format("export --checkpoint {} --onnx {}", torch, dir.file("x.onnx")));
  EXPECT_EQ(not_kiln.rc, 2);
  testing::expect_contains(not_kiln, {torch, "does not record its 'model'"}, "a state_dict as checkpoint");
}

}  // namespace
}  // namespace kiln
