// CBR fusion off (CompileOptions::fuse_cbr = false, `kiln train/plan --no-fuse`) means unfused for
// every model, the zoo's explicit cbr() layers included: they run as Conv, BN and ReLU with the
// fused program's tensor names, so the two programs hold the same parameters and checkpoints move
// between them, and they train alike.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "ir/fused_layer_kinds.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/trainer.h"
#include "kiln/zoo.h"
#include "support/program_fixture.h"

namespace kiln {
namespace {

CompileOptions options(bool fuse, int batch = 2) {
  CompileOptions o;
  o.batch = batch;
  o.fuse_cbr = fuse;
  return o;
}

struct NamedShape {
  std::string name;
  Shape shape;
  bool operator==(const NamedShape&) const = default;
};

std::vector<NamedShape> listed(const Program& p, const std::vector<int>& ids) {
  std::vector<NamedShape> out;
  for (int id : ids) out.push_back({p.tensors[id].name, p.tensors[id].shape});
  return out;
}

void expect_unfused_like_fused(const Blueprint& model) {
  SCOPED_TRACE(model.name());
  const Program fused = compile(model, options(true));
  const Program unfused = compile(model, options(false));
  const int cbr = fused.graph.count(LayerKind::CBR);
  const int conv_bn = fused.graph.count(fused_layer::ConvBN), tails = fused.graph.count(fused_layer::BnAddRelu);
  EXPECT_GT(cbr, 0);
  for (LayerKind k : {LayerKind::CBR, fused_layer::ConvBN, fused_layer::BnAddRelu}) EXPECT_EQ(unfused.graph.count(k), 0);
  // Each block end was Conv + BN (one or two) + Add + ReLU.
  EXPECT_EQ(unfused.graph.count(LayerKind::Conv), fused.graph.count(LayerKind::Conv) + cbr + conv_bn);
  EXPECT_EQ(unfused.graph.count(LayerKind::BatchNorm), fused.graph.count(LayerKind::BatchNorm) + cbr + conv_bn);
  EXPECT_EQ(unfused.graph.count(LayerKind::ReLU), fused.graph.count(LayerKind::ReLU) + cbr + tails);
  EXPECT_EQ(unfused.graph.count(LayerKind::Add), fused.graph.count(LayerKind::Add) + tails);
  // The same parameters and buffers, by name and shape, in the same order.
  EXPECT_EQ(listed(unfused, unfused.params), listed(fused, fused.params));
  EXPECT_EQ(listed(unfused, unfused.buffers), listed(fused, fused.buffers));
  EXPECT_EQ(unfused.tensors[unfused.logits].shape, fused.tensors[fused.logits].shape);
}

TEST(UnfusedCbr, ZooModelsCompileWithoutCbrLayersAndTheSameParameters) {
  expect_unfused_like_fused(zoo::digits_cnn());
  expect_unfused_like_fused(zoo::vgg16_bn());
  expect_unfused_like_fused(zoo::resnet18_cifar());
  // The names a checkpoint holds: "<cbr>.conv.weight", "<cbr>.bn.running_var".
  const Program unfused = compile(zoo::digits_cnn(), options(false));
  EXPECT_GE(unfused.find("conv1.conv.weight"), 0);
  EXPECT_GE(unfused.find("conv1.bn.running_var"), 0);
  const Program vgg = compile(zoo::vgg16_bn(), options(false));
  EXPECT_GE(vgg.find("features.0.conv.weight"), 0);
  EXPECT_GE(vgg.find("features.0.bn.running_var"), 0);
}

TEST(UnfusedCbr, ExplicitCbrKeepsItsErrorsAndAttributes) {
  Blueprint m("m");
  m.input(8, 8, 3).cbr(8, 3, 2, 1, "block").flatten().fc(2);
  const Program p = compile(m, options(false));
  ASSERT_EQ(p.graph.layers.size(), 6u);  // input, conv, bn, relu, flatten, fc
  const Layer& conv = p.graph.layers[1];
  EXPECT_EQ(conv.kind, LayerKind::Conv);
  EXPECT_EQ(conv.name, "block.conv");
  const ConvAttrs& a = attrs_of<ConvAttrs>(conv);
  EXPECT_EQ(a.out_channels, 8);
  EXPECT_EQ(a.kernel_h, 3);
  EXPECT_EQ(a.stride_h, 2);
  EXPECT_EQ(a.pad_top, 1);
  EXPECT_FALSE(a.bias);
  EXPECT_TRUE(conv.marks.first_layer);
  EXPECT_FLOAT_EQ(attrs_of<BatchNormAttrs>(p.graph.layers[2]).eps, 1e-5f);
  EXPECT_EQ(p.graph.layers[2].kind, LayerKind::BatchNorm);
  EXPECT_EQ(p.graph.layers[3].kind, LayerKind::ReLU);
  EXPECT_EQ(p.graph.layers[3].name, "block");  // its output keeps the fused layer's name
  EXPECT_EQ(p.graph.layers[3].out_shape, (Shape{2, 4, 4, 8}));

  Blueprint bad("m");
  bad.input(8, 8, 1).cbr(8, 3, 0, 1, "bad_stride").flatten().fc(2);
  try {
    compile(bad, options(false));
    ADD_FAILURE() << "stride 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad_stride"), std::string::npos) << e.what();
  }
}

// The same initial parameters (initialization is keyed by tensor name) give the same inference
// output: the unfused Conv, BN and ReLU compute what the fused CBR does.
TEST(UnfusedCbr, DigitsCnnComputesTheSameFunction) {
  Executable fused(compile(zoo::digits_cnn(), options(true, 8)), 3);
  Executable unfused(compile(zoo::digits_cnn(), options(false, 8)), 3);
  for (int id : fused.program().params) {
    const std::string& name = fused.program().tensors[id].name;
    EXPECT_EQ(fused.read<float>(id), unfused.read<float>(unfused.id(name))) << name;
  }
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> input(size_t(numel(fused.program().tensors[fused.program().input].shape)));
  for (float& v : input) v = normal(rng);
  fused.write(fused.program().input, input.data(), input.size() * sizeof(float));
  unfused.write(unfused.program().input, input.data(), input.size() * sizeof(float));
  const StepScalars s{0.f, 0, 1};
  fused.run_inference(s);
  unfused.run_inference(s);
  const auto a = fused.read<float>(fused.program().inference_logits);
  const auto b = unfused.read<float>(unfused.program().inference_logits);
  ASSERT_EQ(a.size(), b.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += (a[i] - b[i]) * (a[i] - b[i]), norm += a[i] * a[i];
  EXPECT_LT(std::sqrt(diff / norm), 1e-5);
}

// The zoo's digits CNN without its dropout: dropout masks are drawn per layer position, which
// fusion changes, so with it fused and unfused runs differ by more than rounding.
Blueprint digits_cnn_without_dropout() {
  Blueprint m("digits_cnn_without_dropout");
  m.input(20, 20, 1);
  m.cbr(32, 3, 1, 1, "conv1").cbr(32, 3, 1, 1, "conv2").maxpool(2, 2, 0, "pool1");
  m.cbr(64, 3, 1, 1, "conv3").cbr(64, 3, 1, 1, "conv4").maxpool(2, 2, 0, "pool2");
  m.flatten("flatten").fc(128, true, "fc1").relu("relu1").fc(10, true, "fc2");
  return m;
}

// SGD steps on one batch: fused and unfused give the same losses to rounding.
TEST(UnfusedCbr, DigitsCnnLayersTakeTheSameSteps) {
  CompileOptions o = options(true, 16);
  o.optimizer.set("momentum", 0.9);
  Executable fused(compile(digits_cnn_without_dropout(), o), 1);
  o.fuse_cbr = false;
  Executable unfused(compile(digits_cnn_without_dropout(), o), 1);
  ASSERT_EQ(unfused.program().graph.count(LayerKind::CBR), 0);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int32_t> label(0, 9);
  std::vector<float> input(size_t(numel(fused.program().tensors[fused.program().input].shape)));
  for (float& v : input) v = normal(rng);
  std::vector<int32_t> labels(16);
  for (int32_t& l : labels) l = label(rng);
  std::vector<double> losses[2];
  for (int step = 0; step < 5; ++step) {
    const StepScalars s{0.02f, step, 1};
    int which = 0;
    for (Executable* exe : {&fused, &unfused}) {
      exe->write(exe->program().input, input.data(), input.size() * sizeof(float));
      exe->write(exe->program().label, labels.data(), labels.size() * sizeof(int32_t));
      exe->run_forward(s);
      exe->run_backward(s);
      exe->run_update(s);
      losses[which++].push_back(exe->read<float>(exe->program().loss).at(0));
    }
  }
  for (size_t i = 0; i < losses[0].size(); ++i)
    EXPECT_NEAR(losses[1][i], losses[0][i], 1e-4 * losses[0][i]) << "step " << i;
  EXPECT_LT(losses[0].back(), losses[0].front());  // it did train
}

Dataset first(Dataset d, int64_t n) {
  d.count = n;
  d.images.resize(size_t(n * d.image_size()));
  d.labels.resize(size_t(n));
  return d;
}

// A short run on real digits through the Trainer, fused and unfused: close losses and accuracies
// (the same bytes are not promised), and the fused run's checkpoint, loaded by an unfused program,
// answers alike.
TEST(UnfusedCbr, DigitsCnnTrainsAlikeAndCheckpointsMoveBetweenTheTwo) {
  const std::string dir = testing::shared_digits_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte")) GTEST_SKIP() << dir << " is absent";
  const Dataset train = first(load_dataset(dir, "idx", true), 512);
  const Dataset test = first(load_dataset(dir, "idx", false), 300);
  CompileOptions c = options(true, 64);
  c.optimizer.set("momentum", 0.9);
  c.optimizer.set("weight_decay", 5e-4);
  TrainOptions t;
  t.epochs = 2;
  t.schedule.kind = ScheduleKind::Constant;
  t.schedule.lr = 0.05f;
  t.seed = 1;
  t.workers = 1;
  Trainer fused(digits_cnn_without_dropout(), c, t);
  c.fuse_cbr = false;
  Trainer unfused(digits_cnn_without_dropout(), c, t);
  const auto a = fused.fit(train, test);
  const auto b = unfused.fit(train, test);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    std::printf("epoch %zu: fused loss %.6f, test accuracy %.4f; unfused loss %.6f, test accuracy %.4f\n", e + 1,
                a[e].train_loss, a[e].test_accuracy, b[e].train_loss, b[e].test_accuracy);
    // Rounding differences grow over the steps: 0.3% apart after the second epoch here.
    EXPECT_NEAR(b[e].train_loss, a[e].train_loss, 0.02 * a[e].train_loss) << "epoch " << e + 1;
    EXPECT_NEAR(b[e].test_accuracy, a[e].test_accuracy, 0.03) << "epoch " << e + 1;
  }
  EXPECT_LT(a[1].train_loss, a[0].train_loss);

  const std::filesystem::path tmp =
      std::filesystem::temp_directory_path() / ("kiln_unfused_cbr_" + std::to_string(::getpid()));
  std::filesystem::create_directories(tmp);
  const std::string ckpt = (tmp / "fused.safetensors").string();
  fused.save_checkpoint(ckpt, 2);
  Trainer reader(digits_cnn_without_dropout(), c, t);
  EXPECT_EQ(reader.load_checkpoint(ckpt), 2);
  EXPECT_NEAR(reader.evaluate(test), a[1].test_accuracy, 2.0 / 300);
  std::filesystem::remove_all(tmp);
}

}  // namespace
}  // namespace kiln
