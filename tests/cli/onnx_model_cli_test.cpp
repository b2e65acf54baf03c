// kiln --model net.onnx (issue 50): an ONNX file that `kiln export --onnx --keep-bn` wrote of a
// trained digits_cnn is planned as the zoo model's program, trains from the file's weights (or from
// kiln's initialization with --no-weights, or with a new head for other classes), and its
// checkpoint remembers the file: eval and predict rebuild the model from it, and a changed file is
// refused by --resume, eval and predict alike. A missing or damaged file is refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/kiln_cli.h"
#include "support/program_fixture.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::expect_contains;
using testing::kiln;
using testing::Result;

// Learning rate 1e-7: a run that changes no weight measurably, so its test accuracy is where it started.
const std::string kStill = "train --device cpu --batch 64 --workers 1 --seed 3 --epochs 1 --lr 1e-7 ";

// `kiln plan`'s layers (after passes) as "kind name shape", in order, dropout layers left out: kiln
// exports the inference graph, where dropout is the identity and writes no node, so the file's
// program is the zoo model's without its dropout.
std::vector<std::string> layers_but_dropout(const std::string& plan) {
  std::vector<std::string> layers;
  const size_t start = plan.find("layers (after passes):\n");
  if (start == std::string::npos) return layers;
  std::istringstream lines(plan.substr(start + 23));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string position, kind, name, shape;
    if (!(words >> position >> kind >> name >> shape) || position.find_first_not_of("0123456789") != std::string::npos)
      break;  // the section's end
    if (kind != "dropout") layers.push_back(kind + " " + name + " " + shape);
  }
  return layers;
}

void copy_file(const std::string& from, const std::string& to) {
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

// One PNG of the digits' validation images, for kiln predict.
std::string a_digit_png() {
  const std::string dir = KILN_SOURCE_DIR "/data/digits_png/val/3";
  if (!fs::exists(dir)) return "";
  for (const auto& e : fs::directory_iterator(dir)) return e.path().string();
  return "";
}

// The data, the trained model and its file are made once for the suite (a training run of a few
// seconds); each test copies what it changes.
class OnnxModelCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("kiln_OnnxModelCli_" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const std::string digits = testing::shared_digits_dir();
    if (!fs::exists(digits + "/t10k-images-idx3-ubyte")) return;  // SetUp fails each test, naming the folder
    testing::write_first_digits(digits, file("digits"), 640, 300);
    // A digits_cnn trained on all 4,000 training digits, exported with its BatchNorm kept.
    train_ = new Result(kiln("train --device cpu --model digits_cnn --batch 64 --workers 1 --epochs 1 --data " + digits +
                             " --checkpoint " + file("zoo.safetensors")));
    if (train_->rc != 0) return;
    export_ = new Result(kiln("export --keep-bn --checkpoint " + file("zoo.safetensors") + " --onnx " + file("net.onnx")));
    eval_ = new Result(kiln("eval --device cpu --checkpoint " + file("zoo.safetensors") + " --data " + file("digits")));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    for (Result* r : {train_, export_, eval_}) delete r;
    delete dir_;
  }
  static std::string file(const std::string& name) { return (*dir_ / name).string(); }

  void SetUp() override {
    const std::string digits = testing::shared_digits_dir();
    ASSERT_TRUE(fs::exists(digits + "/t10k-images-idx3-ubyte")) << "no digits at " << digits << ": run scripts/setup.sh";
    ASSERT_EQ(train_->rc, 0) << train_->output;
    ASSERT_EQ(export_->rc, 0) << export_->output;
    ASSERT_EQ(eval_->rc, 0) << eval_->output;
    small_ = file("digits"), onnx_ = file("net.onnx");
    trained_accuracy_ = testing::test_accuracy(*eval_);
    ASSERT_GT(trained_accuracy_, 0.8) << eval_->output;
  }

  static fs::path* dir_;
  static Result *train_, *export_, *eval_;
  std::string small_, onnx_;
  double trained_accuracy_ = 0;
};

fs::path* OnnxModelCli::dir_ = nullptr;
Result* OnnxModelCli::train_ = nullptr;
Result* OnnxModelCli::export_ = nullptr;
Result* OnnxModelCli::eval_ = nullptr;

TEST_F(OnnxModelCli, PlansAsTheZooModelAndTrainsFromTheFilesWeights) {
  const Result zoo_plan = kiln("plan --device cpu --model digits_cnn");
  const Result file_plan = kiln("plan --device cpu --model " + onnx_);
  ASSERT_EQ(zoo_plan.rc, 0) << zoo_plan.output;
  ASSERT_EQ(file_plan.rc, 0) << file_plan.output;
  expect_contains(file_plan, {onnx_ + ": ONNX opset 17, written by kiln", "SHA-256 "}, "plan --model net.onnx");
  const std::vector<std::string> zoo_layers = layers_but_dropout(zoo_plan.output);
  ASSERT_EQ(zoo_layers.size(), 10u) << zoo_plan.output;  // 4 CBR, 2 maxpool, flatten, fc, relu, fc
  EXPECT_EQ(layers_but_dropout(file_plan.output), zoo_layers) << file_plan.output;
  const Result bench = kiln("bench --device cpu --steps 2 --warmup 1 --model " + onnx_);
  ASSERT_EQ(bench.rc, 0) << bench.output;
  expect_contains(bench, {onnx_ + ": ONNX opset 17", "kiln bench: " + onnx_ + " on cpu fp32, batch 64 at "}, "bench");

  // From the file's weights: the trained model's accuracy. From kiln's initialization: chance.
  const std::string data = "--data " + small_ + " ";
  const Result from_file = kiln(kStill + data + "--model " + onnx_);
  ASSERT_EQ(from_file.rc, 0) << from_file.output;
  expect_contains(from_file, {"kiln: training " + onnx_, "initialized from the weights of " + onnx_ + ": 24 tensors"},
                  "train --model net.onnx");
  EXPECT_NEAR(testing::test_accuracy(from_file), trained_accuracy_, 0.03) << from_file.output;
  const Result scratch = kiln(kStill + data + "--model " + onnx_ + " --no-weights");
  ASSERT_EQ(scratch.rc, 0) << scratch.output;
  expect_contains(scratch, {"--no-weights: " + onnx_ + " starts from kiln's initialization"}, "--no-weights");
  EXPECT_LT(testing::test_accuracy(scratch), trained_accuracy_ - 0.4) << scratch.output;

  // Twelve classes where the file has ten: the last linear layer is new, the rest the file's.
  const Result twelve = kiln(kStill + data + "--model " + onnx_ + " --classes 12");
  ASSERT_EQ(twelve.rc, 0) << twelve.output;
  expect_contains(twelve, {"a new head: 'fc2' (Gemm node", "gives 12 classes where the file's gives 10",
                           "initialized from the weights of " + onnx_ + ": 22 tensors (the new head starts"},
                  "--classes 12");
  EXPECT_LT(testing::test_accuracy(twelve), trained_accuracy_ - 0.4) << twelve.output;  // an untrained head
  const Result plan12 = kiln("plan --device cpu --classes 12 --model " + onnx_);
  ASSERT_EQ(plan12.rc, 0) << plan12.output;
  expect_contains(plan12, {"fc2", "[64,12]"}, "plan --classes 12");

  const Result zoo_only = kiln(kStill + data + "--model digits_cnn --no-weights");
  EXPECT_NE(zoo_only.rc, 0);
  expect_contains(zoo_only, {"--no-weights", "zoo model", "--model FILE.onnx"}, "--no-weights of a zoo model");
}

TEST_F(OnnxModelCli, CheckpointsRememberTheFile) {
  const std::string ck = file("run.safetensors"), run_onnx = file("run.onnx");
  copy_file(onnx_, run_onnx);
  const std::string run = kStill + "--data " + small_ + " --model " + run_onnx + " --checkpoint " + ck;
  const Result trained = kiln(run);
  ASSERT_EQ(trained.rc, 0) << trained.output;
  const Result eval = kiln("eval --device cpu --checkpoint " + ck);
  ASSERT_EQ(eval.rc, 0) << eval.output;
  EXPECT_EQ(testing::test_accuracy(eval), testing::test_accuracy(trained)) << eval.output;
  const std::string png = a_digit_png();
  ASSERT_FALSE(png.empty()) << "data/digits_png is missing: run scripts/setup.sh";
  const Result predicted = kiln("predict --device cpu --checkpoint " + ck + " " + png);
  ASSERT_EQ(predicted.rc, 0) << predicted.output;
  expect_contains(predicted, {png, "1. "}, "predict");
  const Result resumed = kiln(run + " --resume --epochs 2");
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  expect_contains(resumed, {"resumed from " + ck + ": epoch 1 of 2 done"}, "--resume, the same file");

  // Another model in the file: its BatchNorm folded (another export of the same checkpoint).
  const Result folded = kiln("export --fold-bn --overwrite --checkpoint " + ck + " --onnx " + file("folded.onnx"));
  ASSERT_EQ(folded.rc, 0) << folded.output;
  copy_file(file("folded.onnx"), run_onnx);
  const Result refused = kiln(run + " --resume --epochs 3");
  EXPECT_NE(refused.rc, 0) << refused.output;
  expect_contains(refused, {"cannot resume from checkpoint '" + ck + "': it was trained from the ONNX model '" +
                                fs::absolute(run_onnx).lexically_normal().string() + "' (SHA-256 ",
                            "this run's --model is '" + run_onnx + "' (SHA-256 "},
                  "--resume after the file changed");
  for (const std::string& command : std::vector<std::string>{"eval --device cpu --checkpoint " + ck,
                                                              "predict --device cpu --checkpoint " + ck + " " + png,
                                                              "export --checkpoint " + ck + " --torch " +
                                                                  file("w.safetensors")}) {
    const Result r = kiln(command);
    EXPECT_NE(r.rc, 0) << command << "\n" << r.output;
    expect_contains(r, {"has changed since checkpoint '" + ck + "' was trained from it", "then,", "now)",
                        "Put that file back"},
                    command);
  }
  fs::remove(run_onnx);
  const Result gone = kiln("eval --device cpu --checkpoint " + ck);
  EXPECT_NE(gone.rc, 0);
  expect_contains(gone, {"was trained from the ONNX model", "which is not there any more"}, "eval, the file gone");
}

TEST_F(OnnxModelCli, AMissingOrDamagedFileIsRefusedByName) {
  const std::string missing = file("missing.onnx");
  for (const std::string& command : std::vector<std::string>{"plan --device cpu", "bench --device cpu --steps 1",
                                                              kStill + "--data " + small_}) {
    const Result r = kiln(command + " --model " + missing);
    EXPECT_NE(r.rc, 0) << command;
    expect_contains(r, {"--model '" + missing + "': no such file", "torch.onnx.export"}, command + " missing");
  }
  // The file cut after its first kilobyte.
  std::ifstream in(onnx_, std::ios::binary);
  std::ostringstream whole;
  whole << in.rdbuf();
  const std::string damaged = file("damaged.onnx");
  std::ofstream(damaged, std::ios::binary) << whole.str().substr(0, 1024);
  const Result r = kiln("plan --device cpu --model " + damaged);
  EXPECT_NE(r.rc, 0);
  expect_contains(r, {damaged, "damaged or truncated"}, "plan a damaged file");
  fs::create_directories(file("folder.onnx"));
  const Result folder = kiln("plan --device cpu --model " + file("folder.onnx"));
  EXPECT_NE(folder.rc, 0);
  expect_contains(folder, {"--model '" + file("folder.onnx") + "' is a folder"}, "plan a folder");
}

}  // namespace
}  // namespace kiln
