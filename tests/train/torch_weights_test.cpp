// PyTorch state_dicts into kiln programs (kiln/torch_weights.h): the names torchvision gives the zoo
// models' tensors, and a small VGG-style network whose logits, with weights written in PyTorch's
// layouts (OIHW, a biased convolution before BN, a C,H,W flatten), match a reference computed here
// in PyTorch's own NCHW order. Bad files are refused listing what does not fit, loading nothing.
#include "kiln/torch_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kiln/checkpoint.h"
#include "kiln/compile.h"
#include "kiln/zoo.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

CompileOptions cpu(int batch) {
  CompileOptions o;
  o.batch = batch;
  return o;
}

std::set<std::string> mapped(const Program& p) {
  std::set<std::string> out;
  for (const auto& [kiln_name, torch_name] : torch_names(p)) out.insert(torch_name);
  return out;
}

TEST(TorchNames, Vgg16BnTakesTorchvisionsSequentialIndices) {
  const Program p = compile(zoo::vgg16_bn(), cpu(1));
  // torchvision's vgg16_bn state_dict less its convolution biases (folded into BN, below) and
  // num_batches_tracked: 13 conv + BN at these indices, then the three linear layers.
  std::set<std::string> want;
  for (int c : {0, 3, 7, 10, 14, 17, 20, 24, 27, 30, 34, 37, 40}) {
    want.insert("features." + std::to_string(c) + ".weight");
    for (const char* f : {"weight", "bias", "running_mean", "running_var"})
      want.insert("features." + std::to_string(c + 1) + "." + f);
  }
  for (int l : {0, 3, 6})
    for (const char* f : {"weight", "bias"}) want.insert("classifier." + std::to_string(l) + "." + f);
  EXPECT_EQ(mapped(p), want);
  EXPECT_EQ(torch_names(p).at("features.3.conv.weight"), "features.7.weight");
  EXPECT_EQ(torch_names(p).at("features.3.bn.running_var"), "features.8.running_var");
}

TEST(TorchNames, ResNetsTakeTorchvisionsConvAndBnNames) {
  const auto r18 = torch_names(compile(zoo::resnet18(), cpu(1)));
  EXPECT_EQ(r18.at("conv1.conv.weight"), "conv1.weight");
  EXPECT_EQ(r18.at("conv1.bn.running_mean"), "bn1.running_mean");
  EXPECT_EQ(r18.at("layer1.0.conv1.conv.weight"), "layer1.0.conv1.weight");
  EXPECT_EQ(r18.at("layer1.0.conv1.bn.weight"), "layer1.0.bn1.weight");
  EXPECT_EQ(r18.at("layer1.0.conv2.weight"), "layer1.0.conv2.weight");
  EXPECT_EQ(r18.at("layer2.0.downsample.1.running_var"), "layer2.0.downsample.1.running_var");
  EXPECT_EQ(r18.at("fc.weight"), "fc.weight");
  // torchvision's resnet18 has 20 convolutions (17 + 3 shortcuts), each with a BN of 4 tensors, and
  // the fc's 2: 20 * 5 + 2 names, each once.
  EXPECT_EQ(r18.size(), 102u);
  EXPECT_EQ(mapped(compile(zoo::resnet18(), cpu(1))).size(), 102u);
  const auto r50 = torch_names(compile(zoo::resnet50(), cpu(1)));
  EXPECT_EQ(r50.at("layer3.5.conv2.bn.weight"), "layer3.5.bn2.weight");
  EXPECT_EQ(r50.size(), 53u * 5 + 2);  // 53 convolutions with their BN, and the fc
}

// A network in PyTorch's terms: conv(2->3, 3x3, pad 1, with bias) -> BN -> ReLU -> maxpool 2 ->
// flatten -> linear(12 -> 5). Weights in PyTorch's layouts and names.
struct TorchNet {
  static constexpr int N = 2, C = 2, H = 4, W = 4, K = 3, O = 5;
  std::vector<float> conv_w, conv_b, gamma, beta, mean, var, fc_w, fc_b;
  explicit TorchNet(uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f), pos(0.5f, 2.f);
    auto fill = [&](std::vector<float>& v, size_t n, auto& dist) {
      v.resize(n);
      for (float& x : v) x = dist(rng);
    };
    fill(conv_w, K * C * 3 * 3, u), fill(conv_b, K, u), fill(gamma, K, pos), fill(beta, K, u);
    fill(mean, K, u), fill(var, K, pos), fill(fc_w, O * K * 2 * 2, u), fill(fc_b, O, u);
  }
  // x is NCHW; returns logits N x O, in double.
  std::vector<double> logits(const std::vector<float>& x) const {
    std::vector<double> out(N * O);
    for (int n = 0; n < N; ++n) {
      double pooled[K][2][2];
      for (int k = 0; k < K; ++k)
        for (int ph = 0; ph < 2; ++ph)
          for (int pw = 0; pw < 2; ++pw) {
            double best = -1e300;
            for (int dh = 0; dh < 2; ++dh)
              for (int dw = 0; dw < 2; ++dw) {
                const int oh = ph * 2 + dh, ow = pw * 2 + dw;
                double acc = conv_b[k];
                for (int c = 0; c < C; ++c)
                  for (int r = 0; r < 3; ++r)
                    for (int s = 0; s < 3; ++s) {
                      const int ih = oh + r - 1, iw = ow + s - 1;
                      if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                      acc += double(conv_w[((k * C + c) * 3 + r) * 3 + s]) * x[((n * C + c) * H + ih) * W + iw];
                    }
                double y = (acc - mean[k]) / std::sqrt(double(var[k]) + 1e-5) * gamma[k] + beta[k];
                best = std::max(best, std::max(y, 0.0));
              }
            pooled[k][ph][pw] = best;
          }
      for (int o = 0; o < O; ++o) {
        double acc = fc_b[o];
        for (int k = 0; k < K; ++k)  // PyTorch's flatten: C, H, W
          for (int ph = 0; ph < 2; ++ph)
            for (int pw = 0; pw < 2; ++pw) acc += double(fc_w[o * 12 + (k * 2 + ph) * 2 + pw]) * pooled[k][ph][pw];
        out[n * O + o] = acc;
      }
    }
    return out;
  }
  // (PyTorch's BN counter, num_batches_tracked, is int64, which kiln's safetensors reader does not
  // take: tools/torch_to_safetensors.py leaves it out, as here.)
  void save(const std::string& path) const {
    auto tensor = [](const std::string& name, Shape shape, const std::vector<float>& v) {
      NamedTensor t;
      t.name = name, t.dtype = DType::F32, t.shape = std::move(shape);
      t.data.resize(v.size() * sizeof(float));
      std::memcpy(t.data.data(), v.data(), t.data.size());
      return t;
    };
    std::vector<NamedTensor> ts = {tensor("features.0.weight", {K, C, 3, 3}, conv_w),
                                   tensor("features.0.bias", {K}, conv_b),
                                   tensor("features.1.weight", {K}, gamma),
                                   tensor("features.1.bias", {K}, beta),
                                   tensor("features.1.running_mean", {K}, mean),
                                   tensor("features.1.running_var", {K}, var),
                                   tensor("classifier.0.weight", {O, K * 4}, fc_w),
                                   tensor("classifier.0.bias", {O}, fc_b)};
    save_safetensors(path, ts);
  }
};

Blueprint kiln_net() {
  Blueprint m("torch_style");
  m.input(TorchNet::H, TorchNet::W, TorchNet::C)
      .cbr(TorchNet::K, 3, 1, 1, "features.0")
      .maxpool(2, 2, 0, "features.1")
      .flatten()
      .fc(TorchNet::O, true, "classifier.0");
  return m;
}

std::vector<float> inference_logits(Executable& exe, const std::vector<float>& nchw) {
  const Program& p = exe.program();
  std::vector<float> nhwc(nchw.size());
  const int N = TorchNet::N, C = TorchNet::C, H = TorchNet::H, W = TorchNet::W;
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      for (int h = 0; h < H; ++h)
        for (int w = 0; w < W; ++w) nhwc[((n * H + h) * W + w) * C + c] = nchw[((n * C + c) * H + h) * W + w];
  exe.write(p.input, nhwc.data(), nhwc.size() * sizeof(float));
  exe.run_inference({});
  return exe.read<float>(p.inference_logits);
}

TEST(TorchWeights, LogitsMatchPyTorchsLayoutsComputedInNchw) {
  testing::TempDir dir;
  const TorchNet net(7);
  const std::string file = dir.file("torch.safetensors");
  net.save(file);
  Executable exe(compile(kiln_net(), cpu(TorchNet::N)), 1);
  const TorchWeightsLoaded loaded = load_torch_weights(exe, file);
  EXPECT_EQ(loaded.tensors, 7);  // conv weight, BN's four, the linear's two (the conv bias folded in)
  EXPECT_TRUE(loaded.left_out.empty());
  std::vector<float> x(TorchNet::N * TorchNet::C * TorchNet::H * TorchNet::W);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  for (float& v : x) v = u(rng);
  const std::vector<double> want = net.logits(x);
  const std::vector<float> got = inference_logits(exe, x);
  ASSERT_EQ(got.size(), want.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i])), scale = std::max(scale, std::abs(want[i]));
  // fp32 sums of at most 18 products against float64: ~1e-6 relative. A layout mistake (the
  // flatten's order, OIHW read as KRSC, the bias not folded) moves logits by O(1) (checked below).
  EXPECT_LT(worst, 1e-5 * std::max(1.0, scale)) << "worst " << worst;

  // The same file without reordering the linear layer's columns gives other logits: the reorder
  // is what makes them agree (the check above can fail).
  TorchNet shuffled = net;
  for (int o = 0; o < TorchNet::O; ++o)  // write the columns in kiln's H,W,C order instead
    for (int k = 0; k < TorchNet::K; ++k)
      for (int hw = 0; hw < 4; ++hw) shuffled.fc_w[o * 12 + hw * 3 + k] = net.fc_w[o * 12 + k * 4 + hw];
  shuffled.save(file);
  Executable wrong(compile(kiln_net(), cpu(TorchNet::N)), 1);
  load_torch_weights(wrong, file);
  const std::vector<float> off = inference_logits(wrong, x);
  double moved = 0;
  for (size_t i = 0; i < off.size(); ++i) moved = std::max(moved, std::abs(off[i] - want[i]));
  EXPECT_GT(moved, 1e-2);
}

TEST(TorchWeights, AStateDictWithItsInt64CountersIsRefusedNamingTheConverter) {
  // What safetensors.torch.save_file(model.state_dict()) writes for a BatchNorm: its float tensors
  // and num_batches_tracked, an int64 scalar.
  testing::TempDir dir;
  const std::string file = dir.file("raw_state_dict.safetensors");
  const std::string header =
      R"({"bn.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("bn.num_batches_tracked":{"dtype":"I64","shape":[],"data_offsets":[4,12]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header + std::string(12, '\0');
  std::ofstream(file, std::ios::binary) << bytes;
  Executable exe(compile(kiln_net(), cpu(2)), 1);
  testing::expect_error([&] { load_torch_weights(exe, file); },
                        {file, "I64", "num_batches_tracked", "tools/torch_to_safetensors.py"});
}

TEST(TorchWeights, AFileThatDoesNotFitIsRefusedListingItAndLoadsNothing) {
  testing::TempDir dir;
  const std::string file = dir.file("vgg_half.safetensors");
  TorchNet(1).save(file);
  // resnet18's names are not in this file: every one is listed as missing, the file's as unused.
  Executable exe(compile(zoo::resnet18_cifar(), cpu(2)), 1);
  const std::vector<float> before = exe.read<float>(exe.id("conv1.conv.weight"));
  testing::expect_error([&] { load_torch_weights(exe, file); },
                        {file, "nothing was loaded", "missing: 'conv1.weight'", "not used: 'features.0.weight'"});
  EXPECT_EQ(exe.read<float>(exe.id("conv1.conv.weight")), before);

  // Another number of classes: refused naming the head, unless it is a new head.
  Blueprint seven("torch_style");
  seven.input(TorchNet::H, TorchNet::W, TorchNet::C)
      .cbr(TorchNet::K, 3, 1, 1, "features.0")
      .maxpool(2, 2, 0, "features.1")
      .flatten()
      .fc(7, true, "classifier.0");
  Executable other(compile(seven, cpu(2)), 1);
  testing::expect_error([&] { load_torch_weights(other, file); }, {"classifier.0.weight", "[5,12]", "new head"});
  TorchWeightsOptions head;
  head.new_head = true;
  const TorchWeightsLoaded loaded = load_torch_weights(other, file, head);
  EXPECT_EQ(loaded.tensors, 5);
  EXPECT_EQ(loaded.left_out, (std::vector<std::string>{"classifier.0.bias", "classifier.0.weight"}));  // the old head
}

}  // namespace
}  // namespace kiln
