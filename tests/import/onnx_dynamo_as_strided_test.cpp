// x.as_strided as PyTorch's dynamo exporter writes it unoptimized (torch.onnx.export(dynamo=True,
// optimize=False), PyTorch 2.9; torchvision ConvNeXt's AdaptiveAvgPool2d(1) at 64x64): the (N, C, 1, 1)
// mean read back by Gather (Reshape (mean, [-1]), offset 0 + one Unsqueeze (Range (0, size) * stride)
// per axis): every element in order, the identity (import/onnx_as_strided.h). Written here with the
// ONNX library and checked against onnxruntime.
#if KILN_TEST_ONNX_PROTOBUF
#include <gtest/gtest.h>

#include <random>

#include "import_runner.h"

namespace kiln {
namespace {

using testing::OnnxAttr;
using testing::OnnxTestModel;

// input (N, 3, 4, 4) -> Conv 1x1 (6) -> ReduceMean (H, W, keepdims) -> as_strided ((N, 6, 1, 1),
// strides `strides`) -> Flatten -> Gemm (2).
OnnxTestModel pooled_as_strided(uint32_t seed, const std::vector<int64_t>& strides) {
  OnnxTestModel m(3, 4, 4, seed, 18);
  const std::string conv = m.node("Conv", {"input", m.conv_weight("conv.weight", 6, 3, 1, 1)}, "conv");
  const std::string mean = m.node("ReduceMean", {conv, m.int64s("hw", {-1, -2})}, "mean", {OnnxAttr::i("keepdims", 1)});
  const std::string flat = m.node("Reshape", {mean, m.int64s("minus_one", {-1})}, "mean_flat");
  const std::string batch = m.node("Squeeze", {m.node("Shape", {"input"}, "shape", {OnnxAttr::i("start", 0), OnnxAttr::i("end", 1)})}, "n");
  const std::string zero = m.int64s("zero", {0}, false), one = m.int64s("one", {1}, false);
  std::string index = zero;
  const std::vector<std::string> sizes = {batch, m.int64s("c", {6}, false), one, one};
  for (int64_t axis = 0; axis < 4; ++axis) {
    const std::string k = std::to_string(axis);
    std::vector<int64_t> others;
    for (int64_t a = 0; a < 4; ++a)
      if (a != axis) others.push_back(a);
    const std::string range = m.node("Range", {zero, sizes[size_t(axis)], one}, "range_" + k);
    const std::string scaled = m.node("Mul", {range, m.int64s("stride_" + k, {strides[size_t(axis)]}, false)}, "mul_" + k);
    const std::string term = m.node("Unsqueeze", {scaled, m.int64s("axes_" + k, others)}, "unsqueeze_" + k);
    index = m.node("Add", {index, term}, "add_" + k);
  }
  const std::string viewed = m.node("Gather", {flat, index}, "as_strided", {OnnxAttr::i("axis", 0)});
  const std::string rows = m.node("Flatten", {viewed}, "flatten", {OnnxAttr::i("axis", 1)});
  m.output(m.node("Gemm", {rows, m.normal("fc.weight", {2, 6}, 0.5f), m.normal("fc.bias", {2}, 0.1f)}, "logits",
                  {OnnxAttr::i("transB", 1)}),
           2);
  return m;
}

TEST(OnnxDynamoAsStrided, AnAsStridedReadingAPooledMapInOrderIsTheIdentity) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::TempDir dir;
  const OnnxTestModel m = pooled_as_strided(seed, {6, 1, 1, 1});
  const std::vector<testing::ImportedRun> runs = testing::run_imported({{"as_strided", &m}}, dir, seed);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(testing::compiled_layers(runs[0].model, LayerKind::Linear).size(), 1u);
  testing::expect_onnxruntime_logits(runs[0]);
  // Strides that read the channels out of order (every other one) are no identity: still refused.
  const std::string file = dir.file("strided.onnx");
  pooled_as_strided(seed, {6, 2, 1, 1}).save(file);
  const std::string error = testing::error_of([&] { import_onnx(file); });
  EXPECT_NE(error.find("Gather node 'as_strided'"), std::string::npos) << error;
}

}  // namespace
}  // namespace kiln
#endif  // KILN_TEST_ONNX_PROTOBUF
