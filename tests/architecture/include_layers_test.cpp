// The layering docs/design.md states, held by the includes: every `#include "..."` of the library
// (src/, include/kiln/) and the tools goes from a part to a part it may depend on. Bottom up:
//   core (src/core, errors, dtypes, devices, threads) and the IR (src/ir, the Program, the layer
//   graph and its vocabulary, options, the memory plan);
//   on them: the model DSL (src/model, blueprint/zoo), the runtime (src/runtime, executable),
//   the ops (src/ops: they also use the runtime's backend), the data layer (src/data);
//   the file formats (src/formats/<format>/: the files kiln reads and writes) on core and the IR;
//   the compiler (src/compile: the graph passes, the Program's layout, the lowering context and
//   the interfaces its families fill) above the DSL and runtime, and no op family;
//   the lowerings (src/ops/<family>/*_layer.cpp, *_optimizer.cpp, *_loss.cpp, *_loss_scale.cpp,
//   *_lowering.cpp: the files that emit ops through the compiler's LowerContext) above the
//   compiler and the ops, which no other part includes: the build's generated lists reach them;
//   training (src/train) above all of those; the tools on top, and kiln.h, the umbrella header.
// A new public header must be placed in the table below; an include that runs up or across to a
// part not listed fails with the file and the line to change.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Which part each public header belongs to.
const std::map<std::string, std::string> kPublicHeaders = {
    {"error.h", "core"},         {"dtype.h", "core"},          {"device.h", "core"},
    {"threads.h", "core"},       {"device_pixels.h", "core"},  {"program.h", "ir"},
    {"options.h", "ir"},         {"layer_graph.h", "ir"},      {"layer_vocabulary.h", "ir"},
    {"layer_attrs.h", "ir"},     {"layer_kind_attrs.h", "ir"},
    {"memory_plan.h", "ir"},     {"blueprint.h", "model"},     {"zoo.h", "model"},
    {"executable.h", "runtime"}, {"data.h", "data"},           {"image_folder.h", "data"},
    {"compile.h", "compile"},    {"trainer.h", "train"},       {"checkpoint.h", "train"},
    {"schedule.h", "train"},     {"bench.h", "train"},         {"torch_weights.h", "train"},         {"kiln.h", "umbrella"},
    {"export.h", "export"},       {"data_parallel.h", "dist"},   {"safetensors.h", "formats"},
    {"onnx_import.h", "import"},
    // Written by the build from the op families' lists (cmake/activations.cmake, cmake/op_kinds.cmake),
    // in <build>/generated/include.
    {"activation_kinds.h", "ir"}, {"op_kinds.h", "ir"},
};

// What each part may include (itself included).
const std::map<std::string, std::set<std::string>> kMayInclude = {
    {"core", {"core"}},
    {"ir", {"core", "ir"}},
    {"model", {"core", "ir", "model"}},
    {"data", {"core", "data"}},
    // Data parallel (src/dist, kiln/data_parallel.h): the ranks and their NCCL group, on core alone;
    // the runtime averages gradients through it.
    {"dist", {"core", "dist"}},
    // File formats (src/formats/<format>/, kiln/safetensors.h): bytes on disk to tensors, names and
    // events and back, on core and the IR; training, the exporters and the tools read and write them.
    {"formats", {"core", "ir", "formats"}},
    // The settings schema (src/settings): rows of the option structs, on core and the IR's options.
    {"settings", {"core", "ir", "settings"}},
    {"runtime", {"core", "ir", "settings", "dist", "runtime"}},
    {"ops", {"core", "ir", "settings", "runtime", "ops"}},
    {"compile", {"core", "ir", "settings", "model", "runtime", "compile"}},
    {"lowering", {"core", "ir", "settings", "model", "runtime", "ops", "compile", "lowering"}},
    {"train", {"core", "ir", "formats", "settings", "model", "dist", "runtime", "ops", "data", "compile", "train"}},
    // The exporters (src/export/, kiln/export.h): a library of their own above training (kiln_export,
    // cmake/onnx.cmake), which the umbrella header leaves out: kiln::kiln does not link it.
    {"export", {"core", "ir", "formats", "settings", "model", "dist", "runtime", "ops", "data", "compile", "train", "export"}},
    // The ONNX importer (src/import/, kiln/onnx_import.h), in kiln_export beside the exporters: on training (it
    // compiles a Blueprint and loads weights as load_torch_weights does), not on the exporters.
    {"import", {"core", "ir", "formats", "settings", "model", "dist", "runtime", "ops", "data", "compile", "train", "import"}},
    {"umbrella", {"core", "ir", "formats", "model", "dist", "runtime", "data", "compile", "train", "umbrella"}},
    {"tools", {"core", "ir", "formats", "settings", "model", "dist", "runtime", "ops", "data", "compile", "train", "export", "import", "umbrella",
               "tools"}},
};

// The part of a file given relative to the repository root ("" for a public header not in the
// table).
std::string part_of(const std::string& path) {
  const fs::path p(path);
  auto it = p.begin();
  const std::string top = it->string();
  if (top == "include") {
    const auto found = kPublicHeaders.find(p.filename().string());
    return found == kPublicHeaders.end() ? "" : found->second;
  }
  if (top == "tools") return "tools";
  if (top == "src" && ++it != p.end()) {
    const std::string area = it->string();
    // A lowering (<family>/*_layer, *_optimizer, *_loss, *_loss_scale, *_lowering .cpp/.h) sits
    // beside the ops it emits but is the compiler's: it may include the compiler, and no kernel
    // may include it.
    const std::string stem = p.stem().string();
    auto ends_with = [&](const std::string& tail) {
      return stem.size() > tail.size() && stem.compare(stem.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (area == "ops")
      for (const char* tail : {"_layer", "_optimizer", "_loss", "_loss_scale", "_lowering"})
        if (ends_with(tail)) return "lowering";
    // Likewise a layer kind's export (<family>/*_export.cpp/.h) is the exporters'.
    if (area == "ops" && ends_with("_export")) return "export";
    return area;
  }
  return "?";
}

// Where an include names: "kiln/x.h" is a public header, "<folder>/..." a tool's part when `root`'s
// tools/ has that folder ("cli/...", "make_image_folders/..."), else src/.
std::string include_target(const fs::path& root, const std::string& name) {
  if (name.rfind("kiln/", 0) == 0) return "include/" + name;
  const size_t slash = name.find('/');
  std::error_code ec;
  if (slash != std::string::npos && fs::is_directory(root / "tools" / name.substr(0, slash), ec))
    return "tools/" + name;
  return "src/" + name;
}

// Every include of the files under `root`'s src/, include/ and tools/ (tests and their *_test.h
// helpers excluded) that breaks
// the table, as "file:line: includes X (part -> part)"; public headers missing from the table too.
std::vector<std::string> layering_violations(const fs::path& root) {
  std::vector<std::string> found;
  const std::regex include_line(R"re(^\s*#\s*include\s+"([^"]+)")re");
  for (const char* top : {"src", "include", "tools"}) {
    if (!fs::exists(root / top)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      const std::string ext = entry.path().extension().string();
      const std::string file = entry.path().filename().string();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu")) continue;
      // Tests, and the helpers only tests include (*_test.h), are not the library.
      auto ends_with = [&](const std::string& tail) {
        return file.size() > tail.size() && file.compare(file.size() - tail.size(), tail.size(), tail) == 0;
      };
      if (ends_with("_test.cpp") || ends_with("_test.h")) continue;
      const std::string rel = fs::relative(entry.path(), root).generic_string();
      const std::string from = part_of(rel);
      if (from.empty()) {
        found.push_back(rel + ": a public header that the layering table does not place; add it to kPublicHeaders");
        continue;
      }
      std::ifstream in(entry.path());
      std::string line;
      int number = 0;
      while (std::getline(in, line)) {
        ++number;
        std::smatch m;
        if (!std::regex_search(line, m, include_line)) continue;
        const std::string to = part_of(include_target(root, m[1]));
        const auto allowed = kMayInclude.find(from);
        if (to.empty() || allowed == kMayInclude.end() || !allowed->second.count(to))
          found.push_back(rel + ":" + std::to_string(number) + ": includes " + m[1].str() + " (" + from + " -> " +
                          (to.empty() ? "an unplaced header" : to) + ")");
      }
    }
  }
  return found;
}

TEST(IncludeLayers, EveryIncludeFollowsTheLayering) {
  const std::vector<std::string> violations = layering_violations(KILN_SOURCE_DIR);
  std::string all;
  for (const std::string& v : violations) all += "  " + v + "\n";
  EXPECT_TRUE(violations.empty()) << "includes that break the layering (docs/design.md, \"Layers\"):\n" << all;
}

TEST(IncludeLayers, ThePartsFormNoCycle) {
  // Depth-first search over "may include" without self-edges: a back edge is a cycle.
  std::map<std::string, int> state;  // 0 new, 1 on the path, 2 done
  std::function<bool(const std::string&)> cyclic = [&](const std::string& part) {
    state[part] = 1;
    for (const std::string& next : kMayInclude.at(part)) {
      if (next == part) continue;
      if (state[next] == 1 || (state[next] == 0 && cyclic(next))) return true;
    }
    state[part] = 2;
    return false;
  };
  for (const auto& [part, _] : kMayInclude) EXPECT_FALSE(state[part] == 0 && cyclic(part)) << part;
  for (const auto& [header, part] : kPublicHeaders) EXPECT_TRUE(kMayInclude.count(part)) << header;
}

TEST(IncludeLayers, TheCheckFindsAnIncludeThatRunsUp) {
  // The check itself: a kernel that includes the model DSL, and an unplaced public header, are
  // reported; a kernel that includes the IR is not.
  testing::TempDir dir;
  const fs::path root(dir.path());
  fs::create_directories(root / "src/ops/toy");
  fs::create_directories(root / "include/kiln");
  std::ofstream(root / "src/ops/toy/toy_cpu.cpp") << "#include \"kiln/layer_vocabulary.h\"\n"
                                                     "#include \"kiln/blueprint.h\"\n";
  std::ofstream(root / "include/kiln/stray.h") << "#pragma once\n";
  // A layer lowering in the family folder may include the compiler; a kernel may not include it.
  std::ofstream(root / "src/ops/toy/toy_layer.cpp") << "#include \"compile/layer_def.h\"\n";
  std::ofstream(root / "src/ops/toy/toy_cuda.cpp") << "#include \"ops/toy/toy_layer.h\"\n";
  std::ofstream(root / "src/ops/toy/toy_export.cpp") << "#include \"export/layer_export.h\"\n";
  // An optimizer's lowering may include its contract; the compiler may include neither.
  std::ofstream(root / "src/ops/toy/toy_optimizer.cpp") << "#include \"compile/optimizer_family.h\"\n"
                                                           "#include \"ops/toy/toy_contract.h\"\n";
  fs::create_directories(root / "src/compile");
  std::ofstream(root / "src/compile/compile.cpp") << "#include \"ops/toy/toy_contract.h\"\n"
                                                     "#include \"ops/toy/toy_optimizer.h\"\n";
  const std::vector<std::string> found = layering_violations(root);
  ASSERT_EQ(found.size(), 5u);
  std::string joined;
  for (const std::string& f : found) joined += f + "\n";
  EXPECT_NE(joined.find("src/ops/toy/toy_cpu.cpp:2: includes kiln/blueprint.h (ops -> model)"), std::string::npos)
      << joined;
  EXPECT_NE(joined.find("include/kiln/stray.h: a public header"), std::string::npos) << joined;
  EXPECT_NE(joined.find("src/ops/toy/toy_cuda.cpp:1: includes ops/toy/toy_layer.h (ops -> lowering)"),
            std::string::npos)
      << joined;
  EXPECT_NE(joined.find("src/compile/compile.cpp:1: includes ops/toy/toy_contract.h (compile -> ops)"), std::string::npos)
      << joined;
  EXPECT_NE(joined.find("src/compile/compile.cpp:2: includes ops/toy/toy_optimizer.h (compile -> lowering)"),
            std::string::npos)
      << joined;
}

}  // namespace
}  // namespace kiln
