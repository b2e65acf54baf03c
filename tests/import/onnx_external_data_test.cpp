// Weights kept beside the model (ONNX's external data: torch.onnx.export's dynamo exporter writes
// "<model>.onnx.data" by default) are read from the model's folder: the model imports to the same
// weights and logits as with its weights inside, its SHA-256 covers the data file, and each way the
// data can be wrong has its own error (a missing file, a path leaving the folder, bytes past the
// file's end, a length that is not the tensor's, a model read from memory).
#if KILN_TEST_ONNX_PROTOBUF
#include <gtest/gtest.h>

#include <fstream>

#include "import/onnx_import_bytes.h"
#include "import_runner.h"

namespace kiln {
namespace {

using testing::OnnxAttr;
using testing::OnnxTestModel;

// input (N, 3, 6, 6) -> Conv 3x3 (4, bias) -> Relu -> GlobalAveragePool -> Flatten -> Gemm (3).
OnnxTestModel inline_model() {
  OnnxTestModel m(3, 6, 6, 21);
  const std::string c = m.node("Conv", {"input", m.conv_weight("conv.weight", 4, 3, 3, 3), m.normal("conv.bias", {4})},
                               "conv", {OnnxAttr::ints("pads", {1, 1, 1, 1})});
  const std::string f = m.node("Flatten", {m.node("GlobalAveragePool", {m.node("Relu", {c}, "relu")}, "pool")}, "flat");
  m.output(m.node("Gemm", {f, m.normal("fc.weight", {3, 4}), m.normal("fc.bias", {3})}, "logits", {OnnxAttr::i("transB", 1)}), 3);
  return m;
}

// The model with every float initializer's bytes moved to `data_file` (relative to the model),
// one after another at 64-byte aligned offsets as onnx.save_model writes them; returns the data.
std::string move_outside(OnnxTestModel& m, const std::string& data_file) {
  std::string data;
  for (onnx::TensorProto& t : *m.graph()->mutable_initializer()) {
    const std::string raw = t.raw_data();
    data.resize((data.size() + 63) / 64 * 64, '\0');
    const size_t offset = data.size();
    data += raw;
    t.clear_raw_data();
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    const std::pair<const char*, std::string> entries[] = {
        {"location", data_file}, {"offset", std::to_string(offset)}, {"length", std::to_string(raw.size())}};
    for (const auto& [key, value] : entries) {
      onnx::StringStringEntryProto* e = t.add_external_data();
      e->set_key(key), e->set_value(value);
    }
  }
  return data;
}

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

TEST(OnnxExternalData, WeightsBesideTheModelImportAsIfInside) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  testing::TempDir dir;
  const OnnxTestModel inside = inline_model();
  inside.save(dir.file("inside.onnx"));
  OnnxTestModel outside = inline_model();
  const std::string data = move_outside(outside, "outside.onnx.data");
  outside.save(dir.file("outside.onnx"));
  write(dir.file("outside.onnx.data"), data);

  const ImportedModel a = import_onnx(dir.file("inside.onnx")), b = import_onnx(dir.file("outside.onnx"));
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) {
    EXPECT_EQ(a.weights[i].name, b.weights[i].name);
    EXPECT_EQ(a.weights[i].data, b.weights[i].data) << a.weights[i].name;
  }
  const Shape shape = {2, 3, 6, 6};
  const std::vector<float> x = testing::normal_floats(size_t(numel(shape)), 5);
  CompileOptions o;
  o.batch = 2;
  Executable ea(compile(a.blueprint, o), 1), eb(compile(b.blueprint, o), 1);
  load_imported_weights(ea, a);
  load_imported_weights(eb, b);
  EXPECT_EQ(testing::logit_gap(testing::kiln_logits(ea, x, shape), testing::kiln_logits(eb, x, shape)), 0.0);

  // The digest covers the data: another weight in the data file is another model.
  std::string changed = data;
  changed[changed.size() - 1] ^= 0x01;
  write(dir.file("outside.onnx.data"), changed);
  const ImportedModel c = import_onnx(dir.file("outside.onnx"));
  EXPECT_NE(c.sha256, b.sha256);
  EXPECT_EQ(c.sha256.size(), 64u);
}

TEST(OnnxExternalData, EachWayTheDataCanBeWrongHasItsError) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  testing::TempDir dir;
  const auto error_for = [&](const std::string& name, const std::string& location, const std::string& data,
                             const std::string& length = "") {
    OnnxTestModel m = inline_model();
    const std::string bytes = move_outside(m, location);
    if (!length.empty())
      for (onnx::StringStringEntryProto& e : *m.graph()->mutable_initializer(0)->mutable_external_data())
        if (e.key() == "length") e.set_value(length);
    m.save(dir.file(name));
    if (!data.empty()) write(dir.file(location), data == "whole" ? bytes : data);
    return testing::error_of([&] { import_onnx(dir.file(name)); });
  };
  const auto expect_has = [](const std::string& text, const std::vector<std::string>& parts) {
    EXPECT_FALSE(text.empty()) << "no error";
    for (const std::string& p : parts) EXPECT_NE(text.find(p), std::string::npos) << "'" << p << "' in:\n" << text;
  };
  expect_has(error_for("missing.onnx", "missing.data", ""),
             {"tensor 'conv.weight'", "missing.data", "missing or not a readable file", "save_as_external_data=False"});
  expect_has(error_for("escape.onnx", "../escape.data", "whole"),
             {"tensor 'conv.weight'", "'../escape.data'", "not a file beside the model"});
  expect_has(error_for("absolute.onnx", "/etc/hostname", ""), {"'/etc/hostname'", "not a file beside the model"});
  expect_has(error_for("short.onnx", "short.data", "tiny"), {"short.data", "holds 4 bytes", "truncated"});
  expect_has(error_for("length.onnx", "length.data", "whole", "12"),
             {"tensor 'conv.weight' needs 432 bytes", "is 12 bytes"});
  // From memory there is no folder to read it from.
  OnnxTestModel m = inline_model();
  move_outside(m, "x.data");
  const std::string bytes = m.bytes();
  expect_has(testing::error_of([&] {
               onnx_import::import_onnx_bytes({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "memory.onnx", {});
             }),
             {"'memory.onnx'", "read from memory", "import the .onnx file itself"});
}

}  // namespace
}  // namespace kiln
#endif  // KILN_TEST_ONNX_PROTOBUF
