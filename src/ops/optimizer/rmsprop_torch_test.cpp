// kiln's RMSprop against PyTorch's own, torch.optim.RMSprop, over several steps of a small
// network: a compiled program trains, its parameters before the first step and the gradients each
// step's backward wrote go to rmsprop_torch_reference.py, which steps torch tensors of the same
// dtype with torch.optim.RMSprop on those gradients, and the parameters after each step must agree
// (float64: to rounding; float32: to fp32's). Runs where `python3 -c "import torch"` works
// (KILN_TORCH_PYTHON names another interpreter); skips elsewhere, saying so.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/optimizer/rmsprop_reference_test.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::RmspropCase;

std::string python() {
  const char* env = std::getenv("KILN_TORCH_PYTHON");
  return env && *env ? env : "python3";
}

bool torch_importable() {
  static const bool available = std::system((python() + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
  return available;
}

// Beside this test: KILN_SOURCE_DIR's copy when set (binaries built elsewhere), else the source
// tree this file was compiled from.
fs::path reference_script() {
  const char* root = std::getenv("KILN_SOURCE_DIR");
  if (root && *root) return fs::path(root) / "src/ops/optimizer/rmsprop_torch_reference.py";
  return fs::path(__FILE__).parent_path() / "rmsprop_torch_reference.py";
}

Blueprint small_net() {
  Blueprint b("rmsprop_torch_net");
  b.input(6, 6, 2).conv(4, 3, 1, 1, false, "conv1").bn("bn1").relu("relu1").maxpool(2, 2, 0, "pool1");
  b.flatten("flatten").fc(3, true, "fc");
  return b;
}

constexpr float kLr = 0.01f;
constexpr int kSteps = 5;

template <class T>
std::vector<double> widened(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

template <class T>
void compare_with_torch(Precision precision, const RmspropCase& c, double tol) {
  CompileOptions o;
  o.batch = 4, o.precision = precision;
  o.optimizer = {"rmsprop"};
  o.optimizer.set("alpha", c.alpha).set("eps", c.eps).set("weight_decay", c.weight_decay);
  o.optimizer.set("momentum", c.momentum).set("centered", c.centered);
  Executable exe(compile(small_net(), o), 5);
  const Program& p = exe.program();
  // The hyper-parameters as the op carries them (fp32), so both sides run the same numbers.
  const testing::RmspropReference h = testing::rmsprop_reference(c, kLr);
  nlohmann::json in = {{"dtype", precision == Precision::FP64 ? "float64" : "float32"},
                       {"hyper",
                        {{"lr", h.lr},
                         {"alpha", h.alpha},
                         {"eps", h.eps},
                         {"weight_decay", h.weight_decay},
                         {"momentum", h.momentum},
                         {"centered", h.centered}}}};
  for (int id : p.params) in["params"][p.tensors[size_t(id)].name] = widened(exe.read<T>(id));
  std::vector<std::map<std::string, std::vector<double>>> kiln_steps;
  std::mt19937 rng(17);
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<double> x = testing::uniform_vec(rng, size_t(numel(p.tensors[size_t(p.input)].shape)));
    const std::vector<T> input(x.begin(), x.end());
    exe.write(p.input, input.data(), input.size() * sizeof(T));
    const std::vector<int32_t> labels = {0, 2, 1, int32_t(step % 3)};
    exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
    const StepScalars s{kLr, step, 1};
    exe.run_forward(s);
    exe.run_backward(s);
    nlohmann::json grads;
    for (int id : p.params) grads[p.tensors[size_t(id)].name] = exe.gradient(p.tensors[size_t(id)].name);
    in["steps"].push_back({{"grads", grads}});
    exe.run_update(s);
    std::map<std::string, std::vector<double>> after;
    for (int id : p.params) after[p.tensors[size_t(id)].name] = widened(exe.read<T>(id));
    kiln_steps.push_back(std::move(after));
  }
  testing::TempDir dir;
  const std::string in_file = dir.file("in.json"), out_file = dir.file("out.json");
  std::ofstream(in_file) << in.dump();
  const std::string cmd = python() + " " + reference_script().string() + " " + in_file + " " + out_file;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  nlohmann::json out;
  std::ifstream(out_file) >> out;
  ASSERT_EQ(out["steps"].size(), size_t(kSteps));
  for (int step = 0; step < kSteps; ++step)
    for (const auto& [name, values] : kiln_steps[size_t(step)]) {
      SCOPED_TRACE("step " + std::to_string(step) + " " + name + " (torch " + out["torch"].template get<std::string>() +
                   ")");
      const std::vector<double> torch = out["steps"][size_t(step)][name].template get<std::vector<double>>();
      testing::expect_close(name, values, torch, tol);
    }
}

TEST(RmspropTorch, StepsMatchTorchOptimRmsprop) {
  if (!torch_importable())
    GTEST_SKIP() << python() << " cannot import torch here: the comparison with torch.optim.RMSprop runs where it "
                 << "can (the GPU machine; KILN_TORCH_PYTHON names another interpreter)";
  for (const RmspropCase& c : testing::rmsprop_cases()) {
    SCOPED_TRACE(c.name);
    compare_with_torch<double>(Precision::FP64, c, 1e-12);
    compare_with_torch<float>(Precision::FP32, c, 1e-5);
  }
}

}  // namespace
}  // namespace kiln
