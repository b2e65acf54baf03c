// OnnxImportOptions::num_classes (kiln train --model net.onnx on data of other classes): the linear
// layer computing the file's output gets that many outputs, a new head whose weight and bias are
// left out of the import's weights (with a note naming them), whether it is a Gemm or a MatMul + Add;
// every other layer keeps the file's weights, which load beside the new head with new_head set. The
// file's own count changes nothing, a head that is not a linear layer is left as it is, and a
// negative count is refused.
#if KILN_TEST_ONNX_PROTOBUF
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "import_runner.h"
#include "kiln/executable.h"

namespace kiln {
namespace {

using testing::OnnxAttr;
using testing::OnnxTestModel;

// conv -> relu -> global pooling -> fc1 (Gemm, 8 outputs) -> relu -> head: a Gemm, or a MatMul + Add
// (its weight (in, out)), of `classes` outputs.
OnnxTestModel two_linear_layers(bool matmul_head, int64_t classes = 5) {
  OnnxTestModel m(3, 6, 6, 7);
  const std::string conv = m.node("Conv", {"input", m.conv_weight("conv.weight", 6, 3, 3, 3), m.normal("conv.bias", {6})},
                                  "/conv/Conv", {OnnxAttr::ints("pads", {1, 1, 1, 1})});
  const std::string pooled = m.node("Flatten", {m.node("GlobalAveragePool", {m.node("Relu", {conv}, "/relu/Relu")},
                                                       "/pool/GlobalAveragePool")}, "/Flatten");
  const std::string fc1 = m.node("Relu", {m.node("Gemm", {pooled, m.normal("fc1.weight", {8, 6}), m.normal("fc1.bias", {8})},
                                                 "/fc1/Gemm", {OnnxAttr::i("transB", 1)})}, "/relu1/Relu");
  const std::string logits =
      matmul_head ? m.node("Add", {m.node("MatMul", {fc1, m.normal("head.weight", {8, classes})}, "/head/MatMul"),
                                   m.normal("head.bias", {classes})}, "/head/Add")
                  : m.node("Gemm", {fc1, m.normal("head.weight", {classes, 8}), m.normal("head.bias", {classes})},
                           "/head/Gemm", {OnnxAttr::i("transB", 1)});
  m.output(logits, classes);
  return m;
}

std::vector<int> linear_widths(const ImportedModel& m) {
  std::vector<int> widths;
  for (const Layer& l : testing::compiled_layers(m, LayerKind::Linear)) widths.push_back(attrs_of<LinearAttrs>(l).out_features);
  return widths;
}

std::vector<std::string> weight_names(const ImportedModel& m) {
  std::vector<std::string> names;
  for (const NamedTensor& t : m.weights) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  return names;
}

bool has_note(const ImportedModel& m, const std::string& part) {
  return std::any_of(m.notes.begin(), m.notes.end(), [&](const std::string& n) { return n.find(part) != std::string::npos; });
}

TEST(OnnxNewHead, TheLastLinearLayerGivesTheClassesAskedAndLeavesTheFilesHeadOut) {
  if (!onnx_import_available()) GTEST_SKIP();
  testing::TempDir dir;
  const std::vector<std::string> all = {"conv.bias", "conv.weight", "fc1.bias", "fc1.weight", "head.bias", "head.weight"};
  const std::vector<std::string> body = {"conv.bias", "conv.weight", "fc1.bias", "fc1.weight"};
  for (const bool matmul : {false, true}) {
    SCOPED_TRACE(matmul ? "MatMul + Add head" : "Gemm head");
    const std::string path = dir.file(matmul ? "matmul.onnx" : "gemm.onnx");
    two_linear_layers(matmul).save(path);
    for (const int own : {0, 5}) {  // the file's count, left to the file or asked for
      OnnxImportOptions o;
      o.num_classes = own;
      const ImportedModel m = import_onnx(path, o);
      EXPECT_EQ(linear_widths(m), (std::vector<int>{8, 5}));
      EXPECT_EQ(weight_names(m), all);
      EXPECT_FALSE(has_note(m, "a new head"));
    }
    OnnxImportOptions three;
    three.num_classes = 3;
    const ImportedModel m = import_onnx(path, three);
    EXPECT_EQ(linear_widths(m), (std::vector<int>{8, 3}));
    EXPECT_EQ(weight_names(m), body);
    for (const auto& [initializer, kiln_tensor] : m.kiln_tensor) EXPECT_NE(initializer.rfind("head.", 0), 0u) << initializer;
    EXPECT_TRUE(has_note(m, "a new head: 'head'")) << ::testing::PrintToString(m.notes);
    EXPECT_TRUE(has_note(m, "gives 3 classes where the file's gives 5; its weight 'head.weight' and bias 'head.bias' are "
                            "left out")) << ::testing::PrintToString(m.notes);
    // The body's weights load beside the new head; without new_head the missing head is refused.
    CompileOptions c;
    c.batch = 2;
    Executable exe(compile(m.blueprint, c), 1);
    TorchWeightsOptions fresh;
    fresh.new_head = true;
    EXPECT_EQ(load_imported_weights(exe, m, fresh).tensors, 4);
    Executable strict(compile(m.blueprint, c), 1);
    EXPECT_THROW(load_imported_weights(strict, m), Error);
  }
}

TEST(OnnxNewHead, AHeadThatIsNoLinearLayerAndANegativeCount) {
  if (!onnx_import_available()) GTEST_SKIP();
  testing::TempDir dir;
  // The pooled map as the output: no linear layer to make anew, so the file's 6 classes stay (the
  // command line refuses the run, naming the file's count).
  OnnxTestModel pooled(3, 6, 6, 3);
  const std::string conv = pooled.node("Conv", {"input", pooled.conv_weight("conv.weight", 6, 3, 1, 1)}, "/conv/Conv");
  pooled.output(pooled.node("Flatten", {pooled.node("GlobalAveragePool", {conv}, "/pool")}, "/flat"), 6);
  pooled.save(dir.file("pooled.onnx"));
  OnnxImportOptions three;
  three.num_classes = 3;
  const ImportedModel m = import_onnx(dir.file("pooled.onnx"), three);
  EXPECT_TRUE(testing::compiled_layers(m, LayerKind::Linear).empty());
  EXPECT_EQ(weight_names(m), (std::vector<std::string>{"conv.weight"}));
  OnnxImportOptions negative;
  negative.num_classes = -1;
  try {
    import_onnx(dir.file("pooled.onnx"), negative);
    ADD_FAILURE() << "num_classes -1 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_classes is -1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
#endif  // KILN_TEST_ONNX_PROTOBUF
