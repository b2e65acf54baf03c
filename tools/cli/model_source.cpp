#include "cli/model_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "import/onnx_import_bytes.h"
#include "import/sha256.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/safetensors.h"
#include "kiln/zoo.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFileKey = "model_file";
constexpr const char* kShaKey = "model_sha256";

// How a PyTorch model becomes a file kiln trains: the export that keeps BatchNorm.
constexpr const char* kExportHint =
    "torch.onnx.export(model, torch.randn(1, 3, 224, 224), 'net.onnx', "
    "training=torch.onnx.TrainingMode.TRAINING) writes one";

// The file's bytes; a kiln::Error in --model's words when there are none to read.
std::vector<uint8_t> read_model_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    fail("--model '{}': no such file. Give the path of an ONNX file ({}), or a zoo model's name (`kiln settings` lists "
         "them)", path, kExportHint);
  if (fs::is_directory(path, ec))
    fail("--model '{}' is a folder; give the ONNX file itself ({})", path, kExportHint);
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (!in.good() && !in.eof())
    fail("--model '{}': the file cannot be read; check its permissions", path);
  return bytes;
}

// The classes the imported model gives (its output (N, F)), for a head the importer cannot remake.
int64_t output_classes(const Blueprint& model, int height, int width) {
  CompileOptions probe;
  probe.batch = 1;
  if (height > 0 && model.input_hwc()) probe.input_hwc = {height, width, (*model.input_hwc())[2]};
  const LayerGraph graph = expand(model, probe);
  const Shape& out = graph.layers.back().out_shape;
  return out.empty() ? 0 : out.back();
}

// Whether the last layer is a linear layer the file gave no weight: made anew for other classes.
bool head_is_new(const ImportedModel& m) {
  const BlueprintNode& last = m.blueprint.nodes().back();
  if (last.kind != LayerKind::Linear) return false;
  const std::string weight = last.name + ".weight";
  return std::none_of(m.kiln_tensor.begin(), m.kiln_tensor.end(), [&](const auto& kv) { return kv.second == weight; });
}

ModelSource import_model_file(const std::string& path, const std::vector<uint8_t>& bytes, int classes, int height,
                              int width) {
  OnnxImportOptions options;
  options.height = height, options.width = width;
  options.num_classes = std::max(classes, 0);
  onnx_import::ExternalData external(std::filesystem::path(path).parent_path(), path);  // weights beside the file
  ModelSource s{path, Blueprint(), onnx_import::import_onnx_bytes(bytes, path, options, external), false};
  s.blueprint = s.imported->blueprint;
  s.new_head = head_is_new(*s.imported);
  if (classes > 0) {
    const int64_t given = output_classes(s.blueprint, height, width);
    if (given != classes)
      fail("--model '{}' gives {} classes and this run needs {}: the file's output is not a linear layer kiln can make "
           "anew for other classes (its last layer is '{}'). Train it on data of {} classes, or export the model "
           "with a linear classifier (nn.Linear) at its end", path, given, classes, s.blueprint.nodes().back().name,
           given);
  }
  return s;
}

std::string recipe_value(const std::map<std::string, std::string>& metadata, const std::string& key) {
  const auto it = metadata.find("recipe." + key);
  return it == metadata.end() ? std::string() : it->second;
}

}  // namespace

bool names_onnx_file(const std::string& model) {
  if (model.size() < 5) return false;
  std::string tail = model.substr(model.size() - 5);
  std::transform(tail.begin(), tail.end(), tail.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return tail == ".onnx";
}

ModelSource resolve_model(const std::string& model, int classes, int height, int width) {
  if (!names_onnx_file(model)) return ModelSource{model, zoo::by_name(model, classes), std::nullopt, false};
  return import_model_file(model, read_model_file(model), classes, height, width);
}

void print_model_notes(const ModelSource& source, std::FILE* out) {
  if (!source.is_file()) return;
  const ImportedModel& m = *source.imported;
  fmt::print(out, "kiln: {}: ONNX opset {}{}, SHA-256 {}\n", source.name, m.opset,
             m.producer.empty() ? std::string() : ", written by " + m.producer, m.sha256);
  for (const std::string& note : m.notes) fmt::print(out, "kiln: {}: {}\n", source.name, note);
}

std::vector<std::pair<std::string, std::string>> model_recipe(const ModelSource& source) {
  if (!source.is_file()) return {};
  // Absolute, so that eval and export find it from any folder.
  const std::string path = fs::absolute(source.name).lexically_normal().string();
  return {{kFileKey, path}, {kShaKey, source.imported->sha256}};
}

void check_model_resumes(const std::string& checkpoint, const ModelSource& source) {
  std::error_code ec;
  if (!fs::exists(checkpoint, ec)) return;  // --resume starts fresh
  const std::map<std::string, std::string> metadata = load_safetensors(checkpoint).metadata;
  const std::string their_file = recipe_value(metadata, kFileKey), their_sha = recipe_value(metadata, kShaKey);
  const std::string mine = source.is_file() ? source.imported->sha256 : std::string();
  if (their_sha == mine) return;  // the same file's contents, or zoo models on both sides (the recipe compares those)
  const std::string theirs_text =
      their_file.empty() ? fmt::format("the zoo model {}", recipe_value(metadata, "model"))
                         : fmt::format("the ONNX model '{}' (SHA-256 {})", their_file, their_sha);
  const std::string mine_text = source.is_file()
                                    ? fmt::format("'{}' (SHA-256 {})", source.name, mine)
                                    : fmt::format("the zoo model {}", source.name);
  fail("cannot resume from checkpoint '{}': it was trained from {}, and this run's --model is {}. A checkpoint continues "
       "the model it was trained from: resume with --model {}{}, or start a new run with another checkpoint path",
       checkpoint, theirs_text, mine_text, their_file.empty() ? recipe_value(metadata, "model") : their_file,
       their_file.empty() ? std::string() : " as it was then");
}

ModelSource recorded_model(const std::string& checkpoint, const std::map<std::string, std::string>& metadata,
                           int classes, int height, int width) {
  const std::string file = recipe_value(metadata, kFileKey);
  if (file.empty()) return resolve_model(recipe_value(metadata, "model"), classes);
  const std::string sha = recipe_value(metadata, kShaKey);
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    fail("checkpoint '{}' was trained from the ONNX model '{}', which is not there any more: kiln builds the model "
         "from that file. Put the file back at that path (its SHA-256 was {})", checkpoint, file, sha);
  const std::vector<uint8_t> bytes = read_model_file(file);
  if (const std::string now = sha256_hex(bytes); now != sha)
    fail("the ONNX model '{}' has changed since checkpoint '{}' was trained from it (SHA-256 {} then, {} now): the "
         "checkpoint's weights fit the model the file held then. Put that file back at '{}', or train a new run from "
         "the new file (kiln train --model {})", file, checkpoint, sha, now, file, file);
  return import_model_file(file, bytes, classes, height, width);
}

}  // namespace kiln::cli
