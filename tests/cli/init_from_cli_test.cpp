// kiln train --init-from: a network trained by kiln, written out as PyTorch would hold it (names as
// torchvision writes them, OIHW convolutions, the linear layer's columns in C,H,W order), starts a
// new run where the trained one ended; the same run without it starts from scratch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>

#include "kiln/checkpoint.h"
#include "kiln/compile.h"
#include "kiln/torch_weights.h"
#include "kiln/zoo.h"
#include "support/kiln_cli.h"
#include "support/program_fixture.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

using testing::kiln;
using testing::Result;

const std::string kRun = "train --model digits_cnn --device cpu --batch 64 --workers 1 --seed 3 ";

// The kiln checkpoint's weights as PyTorch's state_dict of the same network would hold them.
void write_as_pytorch(const std::string& checkpoint, const std::string& out) {
  const SafetensorsFile ck = load_safetensors(checkpoint);
  CompileOptions o;
  o.batch = 1;
  const Program p = compile(zoo::digits_cnn(), o);
  std::vector<NamedTensor> torch;
  for (const auto& [kiln_name, torch_name] : torch_names(p)) {
    const NamedTensor* t = ck.find(kiln_name);
    ASSERT_NE(t, nullptr) << kiln_name;
    std::vector<float> v(t->data.size() / 4), w(v.size());
    std::memcpy(v.data(), t->data.data(), t->data.size());
    NamedTensor pt{torch_name, DType::F32, t->shape, {}};
    if (t->shape.size() == 4) {  // KRSC -> OIHW
      const int64_t K = t->shape[0], R = t->shape[1], S = t->shape[2], C = t->shape[3];
      pt.shape = {K, C, R, S};
      for (int64_t k = 0; k < K; ++k)
        for (int64_t r = 0; r < R; ++r)
          for (int64_t s = 0; s < S; ++s)
            for (int64_t c = 0; c < C; ++c) w[((k * C + c) * R + r) * S + s] = v[((k * R + r) * S + s) * C + c];
    } else if (kiln_name == "fc1.weight") {  // columns H,W,C (5x5x64) -> C,H,W
      const int64_t out_f = t->shape[0], in = t->shape[1], H = 5, W = 5, C = 64;
      ASSERT_EQ(in, H * W * C);
      for (int64_t o2 = 0; o2 < out_f; ++o2)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t x = 0; x < W; ++x)
            for (int64_t c = 0; c < C; ++c) w[o2 * in + (c * H + h) * W + x] = v[o2 * in + (h * W + x) * C + c];
    } else {
      w = v;
    }
    pt.data.resize(w.size() * 4);
    std::memcpy(pt.data.data(), w.data(), pt.data.size());
    torch.push_back(std::move(pt));
  }
  save_safetensors(out, torch);
}

TEST(InitFromCli, PyTorchWeightsStartWhereTheirTrainingEnded) {
  testing::TempDir dir;
  const std::string data = "--data " + testing::shared_digits_dir() + " ";
  const std::string ck = dir.file("trained.safetensors"), pt = dir.file("pytorch.safetensors");
  const Result trained = kiln(kRun + data + "--epochs 3 --lr 0.05 --checkpoint " + ck);
  ASSERT_EQ(trained.rc, 0) << trained.output;
  const double trained_acc = testing::test_accuracy(trained);
  ASSERT_GT(trained_acc, 0.9);
  write_as_pytorch(ck, pt);
  // One epoch at a learning rate too small to learn anything: what it scores is where it started.
  const std::string still = kRun + data + "--epochs 1 --lr 1e-7 ";
  const Result from = kiln(still + "--init-from " + pt);
  ASSERT_EQ(from.rc, 0) << from.output;
  testing::expect_contains(from, {"initialized from " + pt + ": 24 tensors"}, "--init-from");
  EXPECT_NEAR(testing::test_accuracy(from), trained_acc, 0.02) << from.output;
  const Result scratch = kiln(still);
  ASSERT_EQ(scratch.rc, 0) << scratch.output;
  EXPECT_LT(testing::test_accuracy(scratch), 0.5) << scratch.output;  // the check above can fail

  // A file of another model is refused before training, naming what does not fit.
  const Result wrong = kiln(kRun + data + "--epochs 1 --model resnet18_cifar --init-from " + pt);
  EXPECT_NE(wrong.rc, 0);
  testing::expect_contains(wrong, {pt, "nothing was loaded", "missing: 'fc.weight'", "not used: 'bn2.bias'"}, "another model");
  EXPECT_EQ(wrong.output.find("epoch 1"), std::string::npos);
  const Result head = kiln(kRun + data + "--epochs 1 --new-head");
  EXPECT_NE(head.rc, 0);
  testing::expect_contains(head, {"--new-head needs --init-from"}, "--new-head alone");
}

// Fine-tuning on top of a frozen backbone: --freeze pool2 keeps every convolution and BN statistic
// of the PyTorch weights as they came, and the new head learns on its features.
TEST(InitFromCli, FrozenBackboneKeepsItsWeightsAndTheHeadLearns) {
  testing::TempDir dir;
  const std::string data = "--data " + testing::shared_digits_dir() + " ";
  const std::string ck = dir.file("trained.safetensors"), pt = dir.file("pytorch.safetensors");
  const std::string tuned = dir.file("tuned.safetensors");
  const Result trained = kiln(kRun + data + "--epochs 2 --lr 0.05 --checkpoint " + ck);
  ASSERT_EQ(trained.rc, 0) << trained.output;
  write_as_pytorch(ck, pt);
  const Result fine =
      kiln(kRun + data + "--epochs 1 --lr 0.05 --new-head --freeze pool2 --init-from " + pt + " --checkpoint " + tuned);
  ASSERT_EQ(fine.rc, 0) << fine.output;
  EXPECT_GT(testing::test_accuracy(fine), 0.9) << "a head on trained features learns in one epoch\n" << fine.output;
  const SafetensorsFile before = load_safetensors(ck), after = load_safetensors(tuned);
  int frozen = 0;
  for (const NamedTensor& t : before.tensors) {
    if (t.name.rfind("conv", 0) != 0) continue;
    const NamedTensor* now = after.find(t.name);
    ASSERT_NE(now, nullptr) << t.name;
    EXPECT_EQ(now->data, t.data) << t.name << " changed although frozen";
    ++frozen;
  }
  EXPECT_EQ(frozen, 4 * 5) << "4 CBR layers: weight, gamma, beta, running mean and variance";
  EXPECT_NE(after.find("fc1.weight")->data, before.find("fc1.weight")->data);
  EXPECT_EQ(load_safetensors(tuned).metadata.at("recipe.freeze"), "pool2");

  const Result plan = kiln("plan --model digits_cnn --freeze pool2");
  ASSERT_EQ(plan.rc, 0) << plan.output;
  testing::expect_contains(plan, {"[frozen: eval mode, not trained]"}, "plan --freeze");
  const Result bad = kiln(kRun + data + "--epochs 1 --freeze conv9");
  EXPECT_NE(bad.rc, 0);
  testing::expect_contains(bad, {"--freeze 'conv9'", "conv1, conv2, pool1"}, "--freeze of no layer");
}

// A digits_cnn folder of two digit classes, 20x20 gray PNGs (`kiln train --transform plain
// --channels 1` reads them at the IDX digits' size): `per_class` training and a fifth as many
// validation images of each.
std::string two_digit_classes(const testing::TempDir& dir, int per_class) {
  namespace fs = std::filesystem;
  const fs::path from = KILN_SOURCE_DIR "/data/digits_png", to = dir.file("two_classes");
  for (const std::string split : {"train", "val"})
    for (const std::string cls : {"0", "1"}) {
      fs::create_directories(to / split / cls);
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(from / split / cls)) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      const size_t n = size_t(split == "train" ? per_class : per_class / 5);
      for (size_t i = 0; i < n && i < files.size(); ++i) fs::copy_file(files[i], to / split / cls / files[i].filename());
    }
  return to.string();
}

// Issue 47, item 7: a kiln checkpoint given to --init-from was answered with 41 missing torchvision
// names. It is recognized by its metadata and starts a new run from its weights and BN statistics
// (not its optimizer state or epochs): at a learning rate too small to move them, the run scores
// what the checkpoint scored. --new-head fine-tunes it for another class count; without it the
// head's shape is refused naming the fix.
TEST(InitFromCli, AKilnCheckpointStartsANewRunFromItsWeights) {
  testing::TempDir dir;
  testing::write_first_digits(testing::shared_digits_dir(), dir.file("digits"), 2048, 256);
  const std::string data = "--data " + dir.file("digits") + " ";
  const std::string ck = dir.file("trained.safetensors");
  const Result trained = kiln(kRun + data + "--epochs 2 --lr 0.05 --checkpoint " + ck);
  ASSERT_EQ(trained.rc, 0) << trained.output;
  const double trained_acc = testing::test_accuracy(trained);
  ASSERT_GT(trained_acc, 0.8);  // far from the 0.1 a run from scratch scores at this learning rate
  const Result from = kiln(kRun + data + "--epochs 1 --lr 1e-7 --init-from " + ck);
  ASSERT_EQ(from.rc, 0) << from.output;
  testing::expect_contains(from, {"initialized from " + ck + ", a kiln checkpoint of digits_cnn after 2 epochs, "
                                  "trained on 20x20x1 images of 10 classes (its weights only: the optimizer state and "
                                  "epochs start afresh): 24 tensors", "epoch 1/1"},
                           "--init-from a kiln checkpoint");
  EXPECT_NEAR(testing::test_accuracy(from), trained_acc, 0.02) << from.output;

  // Two classes of digits: the ten-class head does not fit, and --new-head starts it afresh.
  const std::string two = two_digit_classes(dir, 100);
  const std::string tune = kRun + "--data " + two + " --transform plain --channels 1 --epochs 1 --lr 0.05 --init-from " + ck;
  const Result head = kiln(tune);
  EXPECT_EQ(head.rc, 2) << head.output;
  testing::expect_contains(head, {"a kiln checkpoint of digits_cnn", "'fc2.weight' is [10,128] in the file but [2,128] in "
                                  "this model", "--new-head", "nothing was loaded"}, "another class count");
  EXPECT_EQ(head.output.find("epoch 1/1"), std::string::npos) << head.output;
  const Result tuned = kiln(tune + " --new-head");
  ASSERT_EQ(tuned.rc, 0) << tuned.output;
  testing::expect_contains(tuned, {"22 tensors; left out: fc2.bias, fc2.weight"}, "--new-head");
  EXPECT_GT(testing::test_accuracy(tuned), 0.9) << "a new head on trained features learns in one epoch\n" << tuned.output;
}

// Issue 47, item 7: a file that does not fit says what it is: a kiln checkpoint of another model
// (named, with the --model that fine-tunes it), or a state_dict of torchvision's (its source as
// tools/torch_to_safetensors.py records it, or the architecture its names show).
TEST(InitFromCli, AFileThatDoesNotFitSaysWhatItIs) {
  testing::TempDir dir;
  testing::write_first_digits(testing::shared_digits_dir(), dir.file("digits"), 256, 64);
  const std::string data = "--data " + dir.file("digits") + " ";
  const std::string ck = dir.file("digits.safetensors");
  const Result trained = kiln(kRun + data + "--epochs 1 --checkpoint " + ck);
  ASSERT_EQ(trained.rc, 0) << trained.output;
  const Result other = kiln(kRun + data + "--epochs 1 --model resnet18_cifar --init-from " + ck);
  EXPECT_EQ(other.rc, 2) << other.output;
  testing::expect_contains(other, {"(a kiln checkpoint of digits_cnn after 1 epoch, trained on 20x20x1 images of 10 "
                                   "classes) does not fit this model", "nothing was loaded", "not used: 'fc1.weight'",
                                   "it is a checkpoint of digits_cnn", "--model digits_cnn"}, "another model's");
  EXPECT_EQ(other.output.find("epoch 1/1"), std::string::npos) << other.output;

  // A ResNet's names, without and with the source the conversion script records.
  const std::vector<NamedTensor> resnet = {{"layer1.0.conv1.weight", DType::F32, {2, 2, 1, 1}, std::vector<std::byte>(16)},
                                           {"fc.weight", DType::F32, {1000, 1}, std::vector<std::byte>(4000)}};
  const std::string named = dir.file("resnet.safetensors"), sourced = dir.file("resnet50.safetensors");
  save_safetensors(named, resnet);
  save_safetensors(sourced, resnet, {{"source", "torchvision.models.resnet50(weights=DEFAULT)"}});
  const Result by_names = kiln(kRun + data + "--epochs 1 --init-from " + named);
  EXPECT_EQ(by_names.rc, 2) << by_names.output;
  testing::expect_contains(by_names, {"(a ResNet state_dict as torchvision names it (fc.weight: 1000 classes))",
                                      "missing: 'conv1.weight'"}, "a ResNet state_dict");
  const Result by_source = kiln(kRun + data + "--epochs 1 --init-from " + sourced);
  EXPECT_EQ(by_source.rc, 2) << by_source.output;
  testing::expect_contains(by_source, {"(a state_dict of torchvision.models.resnet50(weights=DEFAULT))"},
                           "a converted torchvision state_dict");
}

}  // namespace
}  // namespace kiln
