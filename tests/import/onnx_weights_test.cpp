// The file's weights in kiln: a convolution's bias before a BatchNorm folded into its running mean
// (and the pair fused as CBR), against onnxruntime; fp16 and float64 initializers loaded as stored;
// parameters under the initializers' names through torch_names and export_torch_weights; layers
// without parameters named after PyTorch's scopes; weights given to another program refused whole.
#if KILN_TEST_ONNX_PROTOBUF
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "import_runner.h"
#include "kiln/export.h"
#include "kiln/safetensors.h"
#include "kiln/torch_weights.h"
#include "kiln/zoo.h"
#include "support/half_host.h"

namespace kiln {
namespace {

using testing::OnnxAttr;
using testing::OnnxTestModel;

// VGG-BN's form: Conv with a bias -> BN -> Relu, twice, with a max pooling between, then the head.
// Node names as PyTorch's scopes write them.
OnnxTestModel biased_conv_bn(uint32_t seed) {
  OnnxTestModel m(3, 8, 8, seed);
  std::string x = "input";
  for (int i = 0; i < 2; ++i) {
    const std::string conv = "features." + std::to_string(3 * i), bn = "features." + std::to_string(3 * i + 1);
    const int64_t in = i == 0 ? 3 : 6;
    std::vector<std::string> norm = m.batch_norm(bn, 6);
    norm.insert(norm.begin(),
                m.node("Conv", {x, m.conv_weight(conv + ".weight", 6, in, 3, 3), m.normal(conv + ".bias", {6}, 0.5f)},
                       "/features/" + conv + "/Conv", {OnnxAttr::ints("pads", {1, 1, 1, 1})}));
    x = m.node("Relu", {m.node("BatchNormalization", norm, "/features/" + bn + "/BatchNormalization")},
               "/features/features." + std::to_string(3 * i + 2) + "/Relu");
    if (i == 0)
      x = m.node("MaxPool", {x}, "/features/features.2b/MaxPool", {OnnxAttr::ints("kernel_shape", {2, 2}), OnnxAttr::ints("strides", {2, 2})});
  }
  const std::string f = m.node("Flatten", {m.node("GlobalAveragePool", {x}, "/avgpool/GlobalAveragePool")}, "/Flatten");
  m.output(m.node("Gemm", {f, m.normal("classifier.weight", {4, 6}), m.normal("classifier.bias", {4})}, "/classifier/Gemm",
                  {OnnxAttr::i("transB", 1)}),
           4);
  return m;
}

TEST(OnnxWeights, AConvBiasBeforeBatchNormFoldsIntoItsRunningMeanAndThePairFuses) {
  if (!onnx_import_available()) GTEST_SKIP();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const OnnxTestModel m = biased_conv_bn(seed);
  testing::TempDir dir;
  std::vector<testing::ImportedRun> runs = testing::run_imported({{"vgg_bn", &m}}, dir, seed);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const testing::ImportedRun& r = runs[0];
  const double gap = testing::logit_gap(r.kiln, r.onnxruntime);
  EXPECT_LT(gap, testing::kImportBound);
  EXPECT_EQ(testing::compiled_layers(r.model, LayerKind::CBR).size(), 2u);
  bool noted = false;
  for (const std::string& n : r.model.notes)
    noted |= n.find("2 convolution biases before a BatchNorm ('features.0.bias' and 1 more) folded") != std::string::npos;
  EXPECT_TRUE(noted);
  for (const NamedTensor& t : r.model.weights) EXPECT_NE(t.name, "features.0.bias");
  // The bound catches the bias left out: the file's running means as they are.
  ImportedModel unfolded = r.model;
  for (NamedTensor& t : unfolded.weights)
    if (t.name.find("running_mean") != std::string::npos)
      for (const auto& init : m.proto().graph().initializer())
        if (init.name() == t.name) std::memcpy(t.data.data(), init.raw_data().data(), t.data.size());
  CompileOptions o;
  o.batch = 3;
  Executable exe(compile(unfolded.blueprint, o), 1);
  load_imported_weights(exe, unfolded);
  const double unfolded_gap = testing::logit_gap(testing::kiln_logits(exe, r.x, r.shape), r.onnxruntime);
  EXPECT_GT(unfolded_gap, testing::kImportBound);
  std::printf("folded biases: gap %.2e; left out: %.2e\n", gap, unfolded_gap);

  // The parameters keep the initializers' names: kiln's tensors, torch_names, and a state_dict
  // written by export_torch_weights.
  for (const auto& [initializer, tensor] : r.model.kiln_tensor) EXPECT_EQ(initializer, tensor);
  export_torch_weights(exe, dir.file("state.safetensors"));
  std::set<std::string> exported, initializers;
  for (const NamedTensor& t : load_safetensors(dir.file("state.safetensors")).tensors) exported.insert(t.name);
  for (const NamedTensor& t : r.model.weights) initializers.insert(t.name);
  EXPECT_EQ(exported, initializers);
  // Layers without parameters are named after PyTorch's scopes.
  const LayerGraph g = expand(r.model.blueprint, o);
  std::set<std::string> names;
  for (const Layer& l : g.layers) names.insert(l.name);
  for (const char* name : {"features.2", "features.5", "features.2b", "avgpool"})
    EXPECT_TRUE(names.count(name)) << name;
}

// A copy of `m` whose convolution weight is stored as fp16 and whose classifier weight as float64,
// and the float32 file of the same values (fp16's rounding applied): both import to the same logits.
TEST(OnnxWeights, Fp16AndFloat64InitializersLoadAsStored) {
  if (!onnx_import_available()) GTEST_SKIP();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  OnnxTestModel f32 = biased_conv_bn(seed), mixed = biased_conv_bn(seed);
  for (int i = 0; i < f32.graph()->initializer_size(); ++i) {
    onnx::TensorProto* t32 = f32.graph()->mutable_initializer(i);
    onnx::TensorProto* t = mixed.graph()->mutable_initializer(i);
    const size_t n = t32->raw_data().size() / 4;
    std::vector<float> v(n);
    std::memcpy(v.data(), t32->raw_data().data(), n * 4);
    if (t32->name() == "features.3.weight") {  // fp16: round to nearest even, kept as bits
      std::string half(n * 2, '\0');
      for (size_t k = 0; k < n; ++k) {
        const uint16_t bits = testing::float_to_half(v[k]);
        std::memcpy(&half[k * 2], &bits, 2);
        v[k] = testing::half_to_float(bits);
      }
      t->set_data_type(onnx::TensorProto::FLOAT16);
      t->set_raw_data(half);
      std::string raw(n * 4, '\0');
      std::memcpy(raw.data(), v.data(), raw.size());
      t32->set_raw_data(raw);
    } else if (t32->name() == "classifier.weight") {  // float64: the float values, widened
      std::string wide(n * 8, '\0');
      for (size_t k = 0; k < n; ++k) {
        const double d = v[k];
        std::memcpy(&wide[k * 8], &d, 8);
      }
      t->set_data_type(onnx::TensorProto::DOUBLE);
      t->set_raw_data(wide);
    }
  }
  testing::TempDir dir;
  f32.save(dir.file("f32.onnx"));
  mixed.save(dir.file("mixed.onnx"));
  const ImportedModel a = import_onnx(dir.file("f32.onnx")), b = import_onnx(dir.file("mixed.onnx"));
  for (const NamedTensor& t : b.weights) {
    if (t.name == "features.3.weight") {
      EXPECT_EQ(t.dtype, DType::F16);
    } else if (t.name == "classifier.weight") {
      EXPECT_EQ(t.dtype, DType::F64);
    }
  }
  CompileOptions o;
  o.batch = 2;
  const Shape shape = {2, 3, 8, 8};
  const std::vector<float> x = testing::normal_floats(size_t(numel(shape)), seed);
  const auto logits = [&](const ImportedModel& m) {
    Executable exe(compile(m.blueprint, o), 1);
    load_imported_weights(exe, m);
    return testing::kiln_logits(exe, x, shape);
  };
  const std::vector<float> want = logits(a);
  EXPECT_EQ(testing::logit_gap(logits(b), want), 0.0);
  // The comparison catches fp16 bits read as bf16.
  ImportedModel misread = b;
  for (NamedTensor& t : misread.weights)
    if (t.dtype == DType::F16) t.dtype = DType::BF16;
  EXPECT_GT(testing::logit_gap(logits(misread), want), 0.0);
}

// ONNX's momentum is the old statistics' weight, float32(1 - m) of PyTorch's m: the import gives back
// PyTorch's m, the decimal (0.1, MobileNetV3's 0.01, MNASNet's 0.0003) as the double it is in
// Python, which 1 - the file's value does not (1 - 0.99f is 0.010000050), so running statistics
// update as the original's.
TEST(OnnxWeights, BatchNormMomentumIsPyTorchsAsWritten) {
  if (!onnx_import_available()) GTEST_SKIP();
  testing::TempDir dir;
  for (const double torch : {0.1, 0.01, 0.0003, 0.25}) {
    OnnxTestModel m(3, 4, 4, 1);
    std::vector<std::string> bn = m.batch_norm("bn", 4);
    bn.insert(bn.begin(), m.node("Conv", {"input", m.conv_weight("conv.weight", 4, 3, 1, 1)}, "conv"));
    const std::string y = m.node("BatchNormalization", bn, "bn", {OnnxAttr::f("momentum", float(1.0 - torch))});
    const std::string f = m.node("Flatten", {m.node("GlobalAveragePool", {y}, "pool")}, "flat");
    m.output(m.node("Gemm", {f, m.normal("fc.weight", {2, 4})}, "logits", {OnnxAttr::i("transB", 1)}), 2);
    m.save(dir.file("bn.onnx"));
    const std::vector<Layer> norms = testing::compiled_layers(import_onnx(dir.file("bn.onnx")), LayerKind::BatchNorm);
    ASSERT_EQ(norms.size(), 1u);
    EXPECT_EQ(attrs_of<BatchNormAttrs>(norms[0]).momentum, torch);
    if (torch != 0.25) {  // what a plain complement gives (0.25 and 0.75 are exact)
      EXPECT_NE(1.0 - double(float(1.0 - torch)), torch);
    }
  }
}

// A weight read through an Identity node (as exporters write a parameter read under another name)
// is the initializer's: the layer takes it under the initializer's name; two Identities of one
// initializer are one tied weight, refused.
TEST(OnnxWeights, AWeightThroughIdentityIsTheInitializers) {
  if (!onnx_import_available()) GTEST_SKIP();
  testing::TempDir dir;
  OnnxTestModel m(3, 4, 4, 1);
  const std::string w = m.node("Identity", {m.conv_weight("conv.weight", 4, 3, 1, 1)}, "onnx::Conv_7");
  const std::string c = m.node("Conv", {"input", w}, "/Conv");
  const std::string f = m.node("Flatten", {m.node("GlobalAveragePool", {c}, "pool")}, "flat");
  m.output(m.node("Gemm", {f, m.normal("fc.weight", {2, 4})}, "logits", {OnnxAttr::i("transB", 1)}), 2);
  m.save(dir.file("identity.onnx"));
  const ImportedModel imported = import_onnx(dir.file("identity.onnx"));
  EXPECT_EQ(imported.kiln_tensor.at("conv.weight"), "conv.weight");  // the layer is named after it, not the node
  CompileOptions o;
  o.batch = 2;
  Executable exe(compile(imported.blueprint, o), 1);
  EXPECT_EQ(load_imported_weights(exe, imported).tensors, 2);

  OnnxTestModel tied(3, 4, 4, 1);
  const std::string shared = tied.conv_weight("conv.weight", 3, 3, 1, 1);
  const std::string a = tied.node("Conv", {"input", tied.node("Identity", {shared}, "w_a")}, "conv_a");
  const std::string b = tied.node("Conv", {a, tied.node("Identity", {shared}, "w_b")}, "conv_b");
  const std::string g = tied.node("Flatten", {tied.node("GlobalAveragePool", {b}, "pool")}, "flat");
  tied.output(tied.node("Gemm", {g, tied.normal("fc.weight", {2, 3})}, "logits", {OnnxAttr::i("transB", 1)}), 2);
  tied.save(dir.file("tied.onnx"));
  const std::string e = testing::error_of([&] { import_onnx(dir.file("tied.onnx")); });
  EXPECT_NE(e.find("the initializer 'conv.weight' is a parameter of both Conv node 'conv_a' and Conv node 'conv_b'"),
            std::string::npos) << e;
}

TEST(OnnxWeights, WeightsForAnotherProgramAreRefusedWhole) {
  if (!onnx_import_available()) GTEST_SKIP();
  const OnnxTestModel m = biased_conv_bn(1);
  testing::TempDir dir;
  m.save(dir.file("vgg_bn.onnx"));
  const ImportedModel imported = import_onnx(dir.file("vgg_bn.onnx"));
  CompileOptions o;
  o.batch = 2;
  o.input_hwc = {8, 8, 3};
  Executable other(compile(zoo::resnet18_cifar(4), o), 1);
  const std::vector<float> before = other.read<float>(other.program().params.at(0));
  const std::string e = testing::error_of([&] { load_imported_weights(other, imported); });
  EXPECT_NE(e.find("the initializers of the ONNX model '" + dir.file("vgg_bn.onnx") + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("nothing was loaded"), std::string::npos) << e;
  EXPECT_NE(e.find("not used: 'features.0.weight'"), std::string::npos) << e;
  EXPECT_EQ(other.read<float>(other.program().params.at(0)), before);
}

}  // namespace
}  // namespace kiln
#endif  // KILN_TEST_ONNX_PROTOBUF
