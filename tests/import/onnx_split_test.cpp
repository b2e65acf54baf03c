// The channel splits as PyTorch's dynamo exporter writes x.chunk(n, dim=1) and x.split(sizes, dim=1)
// (ShuffleNetV2's halves; read from PyTorch 2.9's files), written here with the ONNX library:
// - Split with opset 18's num_outputs (the exporter's optimized file), and Split with its sizes as
//   an input;
// - SplitToSequence with a scalar chunk size, read by SequenceAt at constant positions, a negative
//   one among them (the file of optimize=False), a piece nobody reads left out;
// - channel shuffle with torchvision's .contiguous() written as an Identity between its Transpose
//   and second Reshape.
// Each is compared with onnxruntime's logits; what kiln cannot split is refused, naming the node.
#if KILN_TEST_ONNX_PROTOBUF
#include <gtest/gtest.h>

#include <random>

#include "import_runner.h"

namespace kiln {
namespace {

using testing::OnnxAttr;
using testing::OnnxTestModel;

constexpr int kOpset = 18;

enum class SplitForm { NumOutputs, Sizes, Sequence };

// input (N, 6, 4, 4) -> Conv 1x1 (8) -> Relu -> the split -> each piece through its own 1x1 conv
// (the first piece's kept as it is) -> Concat -> channel shuffle (groups 2, with the Identity) ->
// GlobalAveragePool -> Flatten -> Gemm (3). The pieces: 4 + 4 (NumOutputs), 3 + 5 (Sizes), 3 + 3 + 2
// (Sequence, the last read as position -1, and one more SequenceAt of position 1 read by no node).
OnnxTestModel split_model(SplitForm form, uint32_t seed, int64_t axis = 1) {
  OnnxTestModel m(6, 4, 4, seed, kOpset);
  const std::string conv = m.node("Conv", {"input", m.conv_weight("conv.weight", 8, 6, 1, 1)}, "conv");
  const std::string x = m.node("Relu", {conv}, "relu");
  std::vector<std::string> pieces;
  std::vector<int64_t> sizes;
  if (form == SplitForm::NumOutputs) {
    m.node("Split", {x}, "chunk_0", {OnnxAttr::i("axis", axis), OnnxAttr::i("num_outputs", 2)}, {"chunk_1"});
    pieces = {"chunk_0", "chunk_1"}, sizes = {4, 4};
  } else if (form == SplitForm::Sizes) {
    m.node("Split", {x, m.int64s("split_sizes", {3, 5})}, "split_0", {OnnxAttr::i("axis", axis)}, {"split_1"});
    pieces = {"split_0", "split_1"}, sizes = {3, 5};
  } else {
    const std::string seq = m.node("SplitToSequence", {x, m.int64s("chunk_size", {3}, false)}, "split",
                                   {OnnxAttr::i("axis", axis), OnnxAttr::i("keepdims", 1)});
    for (const auto& [name, at] : std::vector<std::pair<std::string, int64_t>>{{"getitem", 0}, {"getitem_1", 1}, {"getitem_2", -1}})
      pieces.push_back(m.node("SequenceAt", {seq, m.int64s(name + "_at", {at}, false)}, name));
    m.node("SequenceAt", {seq, m.int64s("unread_at", {1}, false)}, "unread");
    sizes = {3, 3, 2};
  }
  std::vector<std::string> branches = {pieces[0]};
  for (size_t k = 1; k < pieces.size(); ++k) {
    const std::string name = "branch" + std::to_string(k);
    branches.push_back(m.node("Conv", {pieces[k], m.conv_weight(name + ".weight", sizes[k], sizes[k], 1, 1)}, name));
  }
  const std::string joined = m.node("Concat", branches, "cat", {OnnxAttr::i("axis", 1)});
  const std::string grouped = m.node("Reshape", {joined, m.int64s("grouped_shape", {0, 2, 4, 4, 4})}, "view");
  const std::string swapped = m.node("Transpose", {grouped}, "transpose", {OnnxAttr::ints("perm", {0, 2, 1, 3, 4})});
  const std::string clone = m.node("Identity", {swapped}, "clone");
  const std::string shuffled = m.node("Reshape", {clone, m.int64s("back_shape", {0, 8, 4, 4})}, "view_1");
  const std::string pooled = m.node("Flatten", {m.node("GlobalAveragePool", {shuffled}, "pool")}, "flat", {OnnxAttr::i("axis", 1)});
  m.output(m.node("Gemm", {pooled, m.normal("fc.weight", {3, 8}, 0.5f)}, "logits", {OnnxAttr::i("transB", 1)}), 3);
  return m;
}

TEST(OnnxSplit, ChannelSplitsAsTheDynamoExporterWritesThemImportAsChannelSlices) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::TempDir dir;
  const OnnxTestModel chunk = split_model(SplitForm::NumOutputs, seed), sized = split_model(SplitForm::Sizes, seed),
                      sequence = split_model(SplitForm::Sequence, seed);
  const std::vector<testing::ImportedRun> runs =
      testing::run_imported({{"split_num_outputs", &chunk}, {"split_sizes", &sized}, {"split_to_sequence", &sequence}},
                            dir, seed);
  ASSERT_EQ(runs.size(), 3u);
  const std::vector<std::vector<int64_t>> widths = {{4, 4}, {3, 5}, {3, 3, 2}};
  for (size_t r = 0; r < runs.size(); ++r) {
    // One channel_slice a piece read (SequenceAt's unread piece makes none), in the pieces' order.
    std::vector<int64_t> got;
    for (const Layer& l : testing::compiled_layers(runs[r].model, LayerKind::ChannelSlice)) got.push_back(l.out_shape.back());
    EXPECT_EQ(got, widths[r]) << runs[r].name;
    EXPECT_EQ(testing::compiled_layers(runs[r].model, LayerKind::ChannelShuffle).size(), 1u) << runs[r].name;
    testing::expect_onnxruntime_logits(runs[r]);
  }
}

TEST(OnnxSplit, ASplitOfAnotherAxisOrOfTheWrongSizesIsRefusedNamingTheNode) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  testing::TempDir dir;
  const std::string height = dir.file("split_height.onnx");
  split_model(SplitForm::NumOutputs, 1, 2).save(height);
  const std::string error = testing::error_of([&] { import_onnx(height); });
  EXPECT_NE(error.find("Split node 'chunk_0': attribute 'axis' is 2; kiln splits the channels (axis 1)"),
            std::string::npos) << error;
  const std::string sequence = dir.file("sequence_height.onnx");
  split_model(SplitForm::Sequence, 1, 3).save(sequence);
  const std::string sequence_error = testing::error_of([&] { import_onnx(sequence); });
  EXPECT_NE(sequence_error.find("SplitToSequence node 'split': attribute 'axis' is 3"), std::string::npos)
      << sequence_error;

  // Sizes that do not add up to the channels (3 + 4 of 8).
  OnnxTestModel m(6, 4, 4, 1, kOpset);
  const std::string conv = m.node("Conv", {"input", m.conv_weight("conv.weight", 8, 6, 1, 1)}, "conv");
  m.node("Split", {conv, m.int64s("split_sizes", {3, 4})}, "split_0", {OnnxAttr::i("axis", 1)}, {"split_1"});
  const std::string joined = m.node("Concat", {"split_0", "split_1"}, "cat", {OnnxAttr::i("axis", 1)});
  const std::string pooled = m.node("Flatten", {m.node("GlobalAveragePool", {joined}, "pool")}, "flat", {OnnxAttr::i("axis", 1)});
  m.output(m.node("Gemm", {pooled, m.normal("fc.weight", {3, 7}, 0.5f)}, "logits", {OnnxAttr::i("transB", 1)}), 3);
  const std::string short_sizes = dir.file("short_sizes.onnx");
  m.save(short_sizes);
  const std::string sizes_error = testing::error_of([&] { import_onnx(short_sizes); });
  EXPECT_NE(sizes_error.find("Split node 'split_0' splits 8 channels into pieces of 3, 4: the pieces must be positive "
                             "and add up to the channels"),
            std::string::npos) << sizes_error;
}

}  // namespace
}  // namespace kiln
#endif  // KILN_TEST_ONNX_PROTOBUF
