// PyTorch state_dicts into kiln programs (kiln/torch_weights.h): the names torchvision gives the zoo
// models' tensors, and a small VGG-style network whose logits, with weights written in PyTorch's
// layouts (OIHW, a biased convolution before BN, a C,H,W flatten), match a reference computed here
// in PyTorch's own NCHW order; files as safetensors.torch.save_file writes a state_dict (BN's int64
// counters, fp16/bf16/float64 weights) load. Bad files are refused listing what does not fit,
// loading nothing.
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
#include "support/hand_written_safetensors.h"
#include "kiln/zoo.h"
#include "support/cpu_test_util.h"
#include "support/half_host.h"
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

// With fusion off (--no-fuse) a cbr() is a Conv, a BatchNorm and a ReLU of the same names: the same
// PyTorch names, so --init-from loads into an unfused program too.
TEST(TorchNames, UnfusedProgramsTakeTheSameNames) {
  for (const char* model : {"resnet18", "vgg16_bn", "digits_cnn"}) {
    CompileOptions unfused = cpu(1);
    unfused.fuse_cbr = false;
    const auto want = torch_names(compile(zoo::by_name(model), cpu(1)));
    EXPECT_EQ(torch_names(compile(zoo::by_name(model), unfused)), want) << model;
    EXPECT_GT(want.size(), 10u) << model;
  }
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
  struct Named {
    std::string name;
    Shape shape;
    const std::vector<float>* values;
  };
  // The state_dict's floating-point tensors, PyTorch's names and shapes.
  std::vector<Named> state() const {
    return {{"features.0.weight", {K, C, 3, 3}, &conv_w}, {"features.0.bias", {K}, &conv_b},
            {"features.1.weight", {K}, &gamma},           {"features.1.bias", {K}, &beta},
            {"features.1.running_mean", {K}, &mean},      {"features.1.running_var", {K}, &var},
            {"classifier.0.weight", {O, K * 4}, &fc_w},   {"classifier.0.bias", {O}, &fc_b}};
  }
  // In float32 through kiln's writer, as tools/torch_to_safetensors.py writes it: without BN's
  // num_batches_tracked.
  void save(const std::string& path) const {
    std::vector<NamedTensor> ts;
    for (const Named& n : state()) {
      NamedTensor t{n.name, DType::F32, n.shape, std::vector<std::byte>(n.values->size() * sizeof(float))};
      std::memcpy(t.data.data(), n.values->data(), t.data.size());
      ts.push_back(std::move(t));
    }
    save_safetensors(path, ts);
  }
  // As safetensors.torch.save_file(model.state_dict(), path) writes it: BN's num_batches_tracked,
  // an int64 scalar, first (save_file lays the widest dtype out first), then the floating-point
  // tensors in `dtype` (F32, F16, BF16 or F64), then `extra`.
  void save_as_pytorch(const std::string& path, DType dtype = DType::F32,
                       const std::vector<testing::RawTensor>& extra = {}) const {
    std::vector<testing::RawTensor> ts = {
        {"features.1.num_batches_tracked", "I64", {}, testing::le_bytes(std::vector<int64_t>{4711})}};
    for (const Named& n : state()) {
      std::vector<uint8_t> bytes;
      if (dtype == DType::F64) {
        bytes = testing::le_bytes(std::vector<double>(n.values->begin(), n.values->end()));
      } else {
        const std::vector<std::byte> encoded = testing::encode(dtype, *n.values);
        for (std::byte b : encoded) bytes.push_back(uint8_t(b));
      }
      ts.push_back({n.name, dtype_name(dtype), n.shape, bytes});
    }
    ts.insert(ts.end(), extra.begin(), extra.end());
    testing::write_safetensors_by_hand(path, ts);
  }
  // The same network with every weight and statistic rounded to `dtype` (F16 or BF16).
  TorchNet rounded(DType dtype) const {
    TorchNet r = *this;
    for (auto* v : {&r.conv_w, &r.conv_b, &r.gamma, &r.beta, &r.mean, &r.var, &r.fc_w, &r.fc_b})
      *v = testing::rounded(dtype, *v);
    return r;
  }
};

// With `dropout_before_fc`, the linear layer reads the flatten through a dropout (AlexNet's
// classifier), which inference passes through unchanged.
Blueprint kiln_net(bool dropout_before_fc = false) {
  Blueprint m("torch_style");
  m.input(TorchNet::H, TorchNet::W, TorchNet::C)
      .cbr(TorchNet::K, 3, 1, 1, "features.0")
      .maxpool(2, 2, 0, "features.1")
      .flatten();
  if (dropout_before_fc) m.dropout(0.5f, "drop");
  m.fc(TorchNet::O, true, "classifier.0");
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
  EXPECT_TRUE(loaded.bn_counters.empty());
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

std::vector<float> test_input() {
  std::vector<float> x(TorchNet::N * TorchNet::C * TorchNet::H * TorchNet::W);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  for (float& v : x) v = u(rng);
  return x;
}

// The largest difference between kiln's logits and a reference, over the reference's scale (at least 1).
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0, scale = 1;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i])), scale = std::max(scale, std::abs(want[i]));
  return worst / scale;
}

// A linear layer reading its flatten through a dropout takes PyTorch's C,H,W columns too (the
// columns were left in that order, 0.34 of the logits off, for AlexNet's classifier before
// torch_layout::flatten_read_by looked through the dropout).
TEST(TorchWeights, ALinearLayerReadingItsFlattenThroughADropoutTakesTheSameColumns) {
  testing::TempDir dir;
  const TorchNet net(7);
  const std::string file = dir.file("torch.safetensors");
  net.save(file);
  Executable exe(compile(kiln_net(/*dropout_before_fc=*/true), cpu(TorchNet::N)), 1);
  load_torch_weights(exe, file);
  // The bound of LogitsMatchPyTorchsLayoutsComputedInNchw, which also shows that columns in the
  // wrong order land far above it.
  EXPECT_LT(relative_error(inference_logits(exe, test_input()), net.logits(test_input())), 1e-5);
}

std::vector<float> logits_from(const std::string& file, TorchWeightsLoaded* loaded = nullptr) {
  Executable exe(compile(kiln_net(), cpu(TorchNet::N)), 1);
  const TorchWeightsLoaded l = load_torch_weights(exe, file);
  if (loaded) *loaded = l;
  return inference_logits(exe, test_input());
}

TEST(TorchWeights, AStateDictWithBnsInt64CountersLoadsAsTheSameFileWithout) {
  testing::TempDir dir;
  const TorchNet net(11);
  const std::string converted = dir.file("converted.safetensors"), raw = dir.file("state_dict.safetensors");
  net.save(converted);
  net.save_as_pytorch(raw);
  TorchWeightsLoaded loaded;
  const std::vector<float> want = logits_from(converted), got = logits_from(raw, &loaded);
  EXPECT_EQ(got, want);  // the same float32 weights, bit for bit the same logits
  EXPECT_LT(relative_error(got, net.logits(test_input())), 1e-5);
  EXPECT_EQ(loaded.tensors, 7);
  EXPECT_EQ(loaded.bn_counters, std::vector<std::string>{"features.1.num_batches_tracked"});
  EXPECT_TRUE(loaded.left_out.empty());

  // A counter of another dtype (a kiln-readable int32, a float) is left out the same way.
  for (const char* dtype : {"I32", "F32"}) {
    const std::string other = dir.file(fmt::format("counter_{}.safetensors", dtype));
    std::vector<testing::RawTensor> ts = {{"features.1.num_batches_tracked", dtype, {}, {1, 0, 0, 0}}};
    for (const TorchNet::Named& n : net.state()) ts.push_back({n.name, "F32", n.shape, testing::le_bytes(*n.values)});
    testing::write_safetensors_by_hand(other, ts);
    EXPECT_EQ(logits_from(other, &loaded), want) << dtype;
    EXPECT_EQ(loaded.bn_counters, std::vector<std::string>{"features.1.num_batches_tracked"}) << dtype;
  }
}

TEST(TorchWeights, ATensorOfADtypeKilnCannotTakeIsRefusedNamingItAndItsDtype) {
  testing::TempDir dir;
  const TorchNet net(12);
  const std::string file = dir.file("extra.safetensors");
  Executable exe(compile(kiln_net(), cpu(TorchNet::N)), 1);
  const std::vector<float> before = exe.read<float>(exe.id("classifier.0.weight"));

  // An int64 tensor that is not a BN counter, which this model has no place for.
  net.save_as_pytorch(file, DType::F32,
                      {{"features.1.step", "I64", {2}, testing::le_bytes(std::vector<int64_t>{1, 2})}});
  testing::expect_error([&] { load_torch_weights(exe, file); },
                        {file, "nothing was loaded", "not used: 'features.1.step' I64 [2]", "a dtype kiln does not load"});

  // A weight the model needs, stored as int8 (quantized) or int32: refused by name and dtype.
  auto replace = [&](const std::string& dtype, size_t width) {
    std::vector<testing::RawTensor> ts;
    for (const TorchNet::Named& n : net.state()) {
      if (n.name == "classifier.0.bias") ts.push_back({n.name, dtype, n.shape, std::vector<uint8_t>(TorchNet::O * width, 1)});
      else ts.push_back({n.name, "F32", n.shape, testing::le_bytes(*n.values)});
    }
    testing::write_safetensors_by_hand(file, ts);
  };
  replace("I8", 1);
  testing::expect_error([&] { load_torch_weights(exe, file); },
                        {"nothing was loaded", "'classifier.0.bias' is I8 [5], not floating point",
                         "kiln loads F32, F16, BF16 or F64 weights"});
  replace("I32", 4);
  testing::expect_error([&] { load_torch_weights(exe, file); }, {"'classifier.0.bias' is I32 [5], not floating point"});
  EXPECT_EQ(exe.read<float>(exe.id("classifier.0.weight")), before);  // nothing was written
}

TEST(TorchWeights, AMalformedInt64EntryIsRefused) {
  testing::TempDir dir;
  const TorchNet net(13);
  const std::string file = dir.file("malformed.safetensors");
  std::vector<testing::RawTensor> ts;
  for (const TorchNet::Named& n : net.state()) ts.push_back({n.name, "F32", n.shape, testing::le_bytes(*n.values)});
  uint64_t data_bytes = 0;
  for (const auto& t : ts) data_bytes += t.data.size();
  // The counter's offsets run past the end of the data: a truncated download.
  ts.push_back({"features.1.num_batches_tracked", "I64", {}, testing::le_bytes(std::vector<int64_t>{9}),
                std::make_pair(data_bytes, data_bytes + 16)});
  testing::write_safetensors_by_hand(file, ts);
  Executable exe(compile(kiln_net(), cpu(TorchNet::N)), 1);
  testing::expect_error([&] { load_torch_weights(exe, file); },
                        {file, "tensor 'features.1.num_batches_tracked'", "run past the", "truncated?"});
}

TEST(TorchWeights, HalfBfloatAndDoubleWeightsLoadWithinTheirRounding) {
  testing::TempDir dir;
  const TorchNet net(14);
  const std::vector<float> x = test_input();
  const std::vector<double> exact = net.logits(x);
  for (DType dtype : {DType::F16, DType::BF16}) {
    const std::string file = dir.file(fmt::format("{}.safetensors", dtype_name(dtype)));
    net.save_as_pytorch(file, dtype);
    const std::vector<float> got = logits_from(file);
    // fp16 and bf16 widen to float32 exactly: kiln computes the rounded network's logits, to
    // float32's precision...
    EXPECT_LT(relative_error(got, net.rounded(dtype).logits(x)), 1e-5) << dtype_name(dtype);
    // ...which the rounding of the weights moves away from the float32 network's, more than that
    // (so the check above tells the rounded weights from the exact ones), but not by much.
    const double moved = relative_error(got, exact);
    EXPECT_GT(moved, 1e-5) << dtype_name(dtype);
    EXPECT_LT(moved, 4 * (dtype == DType::F16 ? 0x1p-11 : 0x1p-8)) << dtype_name(dtype);  // 4 units of rounding
  }
  // float64 weights that are float32 values: the float32 file's logits, bit for bit.
  const std::string f32_file = dir.file("f32.safetensors"), f64_file = dir.file("f64.safetensors");
  net.save_as_pytorch(f32_file, DType::F32);
  net.save_as_pytorch(f64_file, DType::F64);
  EXPECT_EQ(logits_from(f64_file), logits_from(f32_file));

  // A float64 value past float32's range is refused, naming the tensor.
  std::vector<testing::RawTensor> ts;
  for (const TorchNet::Named& n : net.state()) {
    std::vector<double> v(n.values->begin(), n.values->end());
    if (n.name == "classifier.0.weight") v[3] = 1e300;
    ts.push_back({n.name, "F64", n.shape, testing::le_bytes(v)});
  }
  testing::write_safetensors_by_hand(f64_file, ts);
  Executable exe(compile(kiln_net(), cpu(TorchNet::N)), 1);
  testing::expect_error([&] { load_torch_weights(exe, f64_file); },
                        {"nothing was loaded", "'classifier.0.weight' is F64", "past float32's range (at index 3)"});
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
