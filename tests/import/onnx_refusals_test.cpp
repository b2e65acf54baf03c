// What the importer refuses, each with its own message naming the file, the node or tensor and the
// fix: every node kiln cannot train listed at once (operators and attributes), an empty, damaged or
// truncated file, a missing initializer, a cycle, an initializer cut short (external data files:
// onnx_external_data_test.cpp),
// more than one input, an input size left open, a reshape other than a flatten, a flatten in C,H,W
// order read by a layer other than a linear one, ONNX's pre-19 ceil mode keeping a window kiln
// drops, tied weights, quantized weights, an output that is not (N, classes).
#if KILN_TEST_ONNX_PROTOBUF
#include <gtest/gtest.h>

#include "import/onnx_import_bytes.h"
#include "import_runner.h"

namespace kiln {
namespace {

using testing::OnnxAttr;
using testing::OnnxTestModel;

// input (N, 3, 8, 8) -> Conv 3x3 (8) -> Relu -> GlobalAveragePool -> Flatten -> Gemm (4): valid.
OnnxTestModel small_model(uint32_t seed = 1) {
  OnnxTestModel m(3, 8, 8, seed);
  const std::string r = m.node("Relu", {m.node("Conv", {"input", m.conv_weight("conv.weight", 8, 3, 3, 3)}, "conv")}, "relu");
  const std::string f = m.node("Flatten", {m.node("GlobalAveragePool", {r}, "pool")}, "flat");
  m.output(m.node("Gemm", {f, m.normal("fc.weight", {4, 8}), m.normal("fc.bias", {4})}, "logits", {OnnxAttr::i("transB", 1)}), 4);
  return m;
}

std::string import_error(const testing::TempDir& dir, const std::string& name, const OnnxTestModel& m,
                         const OnnxImportOptions& options = {}) {
  m.save(dir.file(name));
  return testing::error_of([&] { import_onnx(dir.file(name), options); });
}

void expect_has(const std::string& text, const std::vector<std::string>& parts) {
  EXPECT_FALSE(text.empty()) << "no error";
  for (const std::string& p : parts) EXPECT_NE(text.find(p), std::string::npos) << "'" << p << "' in:\n" << text;
}

TEST(OnnxRefusals, EveryNodeKilnCannotTrainIsListedAtOnce) {
  if (!onnx_import_available()) GTEST_SKIP();
  OnnxTestModel m(3, 8, 8, 1);
  const std::string c = m.node("Conv", {"input", m.conv_weight("conv.weight", 8, 3, 3, 3)}, "same_conv",
                               {OnnxAttr::s("auto_pad", "SAME_UPPER")});
  const std::string clip = m.node("Clip", {c, m.scalar("zero", 0.f), m.scalar("four", 4.f)}, "clip4");
  const std::string scaled = m.node("Mul", {clip, m.scalar("two", 2.f)}, "scale");
  const std::string pooled = m.node("MaxPool", {scaled}, "dilated_pool",
                                    {OnnxAttr::ints("kernel_shape", {2, 2}), OnnxAttr::ints("dilations", {2, 2})});
  const std::string padded = m.node("Pad", {pooled, m.int64s("pads", {0, 0, 1, 1, 0, 0, 1, 1})}, "pad");
  const std::string f = m.node("Flatten", {m.node("GlobalAveragePool", {padded}, "pool")}, "flat");
  const std::string logits = m.node("Gemm", {f, m.normal("fc.weight", {4, 8})}, "fc", {OnnxAttr::i("transB", 1)});
  m.output(m.node("Softmax", {logits}, "probabilities"), 4);
  testing::TempDir dir;
  const std::string e = import_error(dir, "many.onnx", m);
  expect_has(e, {"many.onnx' holds 6 nodes kiln cannot train as written; nothing was imported",
                 "Conv node 'same_conv': attribute 'auto_pad' is 'SAME_UPPER'; kiln takes explicit pads",
                 "Clip node 'clip4': it clips to [0, 4]; kiln has ReLU6",
                 "Mul node 'scale': its input 'two' is a constant; kiln has no layer scaling by a constant",
                 "MaxPool node 'dilated_pool': attribute 'dilations' is [2, 2]",
                 "Pad node 'pad': kiln reads Pad only as more padding of the one Conv, MaxPool or AveragePool reading it",
                 "Softmax node 'probabilities': kiln trains on logits"});
}

TEST(OnnxRefusals, EmptyDamagedAndTruncatedFiles) {
  if (!onnx_import_available()) GTEST_SKIP();
  testing::TempDir dir;
  testing::write_bytes(dir.file("empty.onnx"), {});
  expect_has(testing::error_of([&] { import_onnx(dir.file("empty.onnx")); }), {"empty.onnx' is empty (0 bytes)"});
  testing::write_bytes(dir.file("garbage.onnx"), {0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x13});
  expect_has(testing::error_of([&] { import_onnx(dir.file("garbage.onnx")); }),
             {"garbage.onnx' is not a readable ONNX model: protobuf cannot parse its 8 bytes"});
  expect_has(testing::error_of([&] { import_onnx(dir.file("missing.onnx")); }), {"missing.onnx"});
  // Cut anywhere inside the graph (the last bytes are the opset and metadata): each cut is refused,
  // none crashes or imports part of a model.
  OnnxTestModel m = small_model();
  m.metadata("model", "small");
  const std::string bytes = m.bytes();
  const size_t graph_end = bytes.size() - 40;
  int refused = 0;
  for (size_t cut = 1; cut < graph_end; cut += graph_end / 37 + 1) {
    const std::vector<uint8_t> part(bytes.begin(), bytes.begin() + std::ptrdiff_t(cut));
    const std::string e = testing::error_of([&] { onnx_import::import_onnx_bytes(part, "cut.onnx", {}); });
    EXPECT_NE(e.find("cut.onnx"), std::string::npos) << "cut at " << cut << " of " << bytes.size() << ": " << e;
    refused += !e.empty();
  }
  // The whole of it, from memory as from the file.
  const std::vector<uint8_t> whole(bytes.begin(), bytes.end());
  EXPECT_EQ(onnx_import::import_onnx_bytes(whole, "whole.onnx", {}).blueprint.name(), "small");
  EXPECT_GE(refused, 30);
  // Cut after the graph but before its opset: read as a file that declares none.
  OnnxTestModel no_opset = small_model();
  no_opset.proto().clear_opset_import();
  expect_has(import_error(dir, "no_opset.onnx", no_opset), {"declares no opset for ONNX's operators", "truncated"});
}

TEST(OnnxRefusals, AMissingInitializerACycleAndAShortInitializer) {
  if (!onnx_import_available()) GTEST_SKIP();
  testing::TempDir dir;
  OnnxTestModel missing = small_model();
  missing.graph()->mutable_initializer()->DeleteSubrange(0, 1);  // conv.weight
  expect_has(import_error(dir, "missing.onnx", missing),
             {"is incomplete: 1 value read by its nodes is provided by no node, initializer or graph input",
              "Conv node 'conv' reads 'conv.weight'", "export_params=True"});

  OnnxTestModel cycle(3, 8, 8, 1);
  cycle.node("Add", {"input", "b"}, "a");
  cycle.node("Relu", {"a"}, "b");
  const std::string f = cycle.node("Flatten", {cycle.node("GlobalAveragePool", {"b"}, "pool")}, "flat");
  cycle.output(cycle.node("Gemm", {f, cycle.normal("fc.weight", {4, 3})}, "logits", {OnnxAttr::i("transB", 1)}), 4);
  expect_has(import_error(dir, "cycle.onnx", cycle), {"cycle.onnx': its graph has a cycle", "Add node 'a'", "Relu node 'b'"});

  OnnxTestModel short_tensor = small_model();
  std::string* raw = short_tensor.graph()->mutable_initializer(0)->mutable_raw_data();
  raw->resize(raw->size() - 4);
  expect_has(import_error(dir, "short.onnx", short_tensor),
             {"tensor 'conv.weight' of shape [8,3,3,3] needs 216 values but holds 215", "damaged or truncated"});
}

TEST(OnnxRefusals, InputsAndTheirSizes) {
  if (!onnx_import_available()) GTEST_SKIP();
  testing::TempDir dir;
  OnnxTestModel two_inputs = small_model();
  onnx::ValueInfoProto* second = two_inputs.graph()->add_input();
  *second = two_inputs.graph()->input(0);
  second->set_name("mask");
  expect_has(import_error(dir, "two.onnx", two_inputs), {"two.onnx' has 2 inputs (input, mask)"});

  OnnxTestModel open_size = small_model();
  auto* dims = open_size.graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  dims->mutable_dim(2)->set_dim_param("H");
  dims->mutable_dim(3)->set_dim_param("W");
  expect_has(import_error(dir, "open.onnx", open_size),
             {"leaves its height and width open ('H' x 'W')", "OnnxImportOptions::height and width"});
  OnnxImportOptions size;
  size.height = 12, size.width = 10;
  const ImportedModel m = import_onnx(dir.file("open.onnx"), size);
  EXPECT_EQ(*m.blueprint.input_hwc(), (Shape{12, 10, 3}));
  size.width = 0;
  expect_has(testing::error_of([&] { import_onnx(dir.file("open.onnx"), size); }), {"give both the height (12) and the width (0)"});
}

TEST(OnnxRefusals, ReshapesFlattensAndCeilModeKilnCannotRunAsWritten) {
  if (!onnx_import_available()) GTEST_SKIP();
  testing::TempDir dir;
  // A reshape to (N, 2, -1): not a flatten.
  OnnxTestModel reshape(3, 8, 8, 1);
  const std::string c = reshape.node("Conv", {"input", reshape.conv_weight("conv.weight", 4, 3, 1, 1)}, "conv");
  const std::string r = reshape.node("Reshape", {c, reshape.int64s("shape", {0, 2, -1})}, "split");
  reshape.output(reshape.node("Gemm", {r, reshape.normal("fc.weight", {4, 128})}, "logits", {OnnxAttr::i("transB", 1)}), 4);
  expect_has(import_error(dir, "reshape.onnx", reshape),
             {"Reshape node 'split' reshapes to (0, 2, -1); kiln reshapes a feature map to (N, -1) only"});

  // A 2x2 map flattened (C,H,W) into a BatchNorm over the features: its statistics would be read in
  // kiln's H,W,C order.
  OnnxTestModel flat_bn(3, 4, 4, 1);
  const std::string p = flat_bn.node(
      "MaxPool", {flat_bn.node("Conv", {"input", flat_bn.conv_weight("conv.weight", 4, 3, 1, 1)}, "conv")}, "pool",
      {OnnxAttr::ints("kernel_shape", {2, 2}), OnnxAttr::ints("strides", {2, 2})});
  std::vector<std::string> bn = flat_bn.batch_norm("bn", 16);
  bn.insert(bn.begin(), flat_bn.node("Flatten", {p}, "flatten"));
  flat_bn.output(flat_bn.node("Gemm", {flat_bn.node("BatchNormalization", bn, "bn"), flat_bn.normal("fc.weight", {4, 16})},
                              "logits", {OnnxAttr::i("transB", 1)}),
                 4);
  expect_has(import_error(dir, "flat_bn.onnx", flat_bn),
             {"Flatten node 'flatten' flattens a 2x2 map of 4 channels in ONNX's C,H,W order, and bn 'bn' reads it"});

  // MaxPool k2 s2 p1 in ceil mode on a 5x5 map: ONNX before opset 19 keeps a third window starting in
  // the padding (4 windows), PyTorch's rule drops it (3). At opset 19 the file means PyTorch's.
  const auto ceil_pool = [](int opset) {
    OnnxTestModel m(3, 5, 5, 1, opset);
    const std::string pool = m.node("MaxPool", {m.node("Conv", {"input", m.conv_weight("conv.weight", 4, 3, 1, 1)}, "conv")},
                                    "pool",
                                    {OnnxAttr::ints("kernel_shape", {2, 2}), OnnxAttr::ints("strides", {2, 2}),
                                     OnnxAttr::ints("pads", {1, 1, 1, 1}), OnnxAttr::i("ceil_mode", 1)});
    const std::string f = m.node("Flatten", {m.node("GlobalAveragePool", {pool}, "gap")}, "flat");
    m.output(m.node("Gemm", {f, m.normal("fc.weight", {4, 4})}, "logits", {OnnxAttr::i("transB", 1)}), 4);
    return m;
  };
  expect_has(import_error(dir, "ceil17.onnx", ceil_pool(17)),
             {"MaxPool node 'pool' pools its 5x5 input in ceil mode", "giving 4x4", "giving 3x3", "opset 19"});
  ceil_pool(19).save(dir.file("ceil19.onnx"));
  EXPECT_NO_THROW(import_onnx(dir.file("ceil19.onnx")));
}

TEST(OnnxRefusals, TiedQuantizedAndMapOutputs) {
  if (!onnx_import_available()) GTEST_SKIP();
  testing::TempDir dir;
  OnnxTestModel tied(3, 8, 8, 1);
  const std::string w = tied.conv_weight("shared.weight", 3, 3, 3, 3);
  const std::string pads = "pads";
  const std::string a = tied.node("Conv", {"input", w}, "conv_a", {OnnxAttr::ints("pads", {1, 1, 1, 1})});
  const std::string b = tied.node("Conv", {a, w}, "conv_b", {OnnxAttr::ints("pads", {1, 1, 1, 1})});
  const std::string f = tied.node("Flatten", {tied.node("GlobalAveragePool", {b}, "pool")}, "flat");
  tied.output(tied.node("Gemm", {f, tied.normal("fc.weight", {4, 3})}, "logits", {OnnxAttr::i("transB", 1)}), 4);
  expect_has(import_error(dir, "tied.onnx", tied),
             {"the initializer 'shared.weight' is a parameter of both Conv node 'conv_a' and Conv node 'conv_b'", "untied"});

  OnnxTestModel quantized = small_model();
  onnx::TensorProto* q = quantized.graph()->mutable_initializer(0);
  q->set_data_type(onnx::TensorProto::INT8);
  q->set_raw_data(std::string(216, '\1'));
  expect_has(import_error(dir, "int8.onnx", quantized),
             {"Conv node 'conv' reads its weight from 'conv.weight', of ONNX element type 3, not floating point"});

  OnnxTestModel map_out(3, 8, 8, 1);
  map_out.output(map_out.node("Relu", {map_out.node("Conv", {"input", map_out.conv_weight("conv.weight", 4, 3, 1, 1)}, "conv")},
                              "relu"),
                 4);
  expect_has(import_error(dir, "map.onnx", map_out), {"its output 'relu' is a feature map (N, C, H, W)"});
}

}  // namespace
}  // namespace kiln
#endif  // KILN_TEST_ONNX_PROTOBUF
