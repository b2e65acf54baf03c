// kiln train --init-from: a network trained by kiln, written out as PyTorch would hold it (names as
// torchvision writes them, OIHW convolutions, the linear layer's columns in C,H,W order), starts a
// new run where the trained one ended; the same run without it starts from scratch.
#include <gtest/gtest.h>

#include <cstring>
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

}  // namespace
}  // namespace kiln
