// kiln train --init-from a file as safetensors.torch.save_file(model.state_dict()) writes it: fp16
// weights and BN's int64 num_batches_tracked counters load (the counters are counted in the
// summary, not named); an int64 tensor of another name is refused before training, by name.
// (Whether the values land where they belong: tests/train/torch_weights_test.cpp.)
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/torch_weights.h"
#include "kiln/zoo.h"
#include "support/half_host.h"
#include "support/kiln_cli.h"
#include "support/program_fixture.h"
#include "support/temp_dir.h"
#include "support/hand_written_safetensors.h"

namespace kiln {
namespace {

using testing::kiln;
using testing::RawTensor;
using testing::Result;

// digits_cnn's state_dict as PyTorch would save it in half precision: every tensor under its
// PyTorch name and shape (OIHW filters), small weights, unit variances, and one int64 counter per
// BatchNorm, then `extra`.
void write_state_dict(const std::string& path, const std::vector<RawTensor>& extra = {}) {
  CompileOptions o;
  o.batch = 1;
  const Program p = compile(zoo::digits_cnn(), o);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::vector<RawTensor> tensors;
  for (const auto& [kiln_name, torch_name] : torch_names(p)) {
    Shape shape = p.tensors[p.find(kiln_name)].shape;
    if (shape.size() == 4) shape = {shape[0], shape[3], shape[1], shape[2]};  // KRSC -> OIHW
    const bool variance = torch_name.ends_with(".running_var");
    std::vector<float> v(size_t(numel(shape)));
    for (float& x : v) x = variance ? 1.f : u(rng);
    std::vector<uint8_t> bytes;
    for (std::byte b : testing::encode(DType::F16, v)) bytes.push_back(uint8_t(b));
    tensors.push_back({torch_name, "F16", shape, bytes});
    if (variance) {
      const std::string bn = torch_name.substr(0, torch_name.size() - std::string(".running_var").size());
      tensors.push_back({bn + ".num_batches_tracked", "I64", {}, testing::le_bytes(std::vector<int64_t>{1875})});
    }
  }
  tensors.insert(tensors.end(), extra.begin(), extra.end());
  testing::write_safetensors_by_hand(path, tensors);
}

TEST(InitFromStateDictCli, AHalfPrecisionStateDictWithItsCountersLoadsAndAnotherInt64TensorIsRefused) {
  testing::TempDir dir;
  const std::string run = "train --model digits_cnn --device cpu --batch 64 --workers 1 --seed 3 --epochs 1 "
                          "--lr 1e-7 --data " + testing::shared_digits_dir() + " --init-from ";
  const std::string state = dir.file("state_dict.safetensors");
  write_state_dict(state);
  const Result loaded = kiln(run + state);
  ASSERT_EQ(loaded.rc, 0) << loaded.output;
  testing::expect_contains(loaded,
                           {"initialized from " + state + ": 24 tensors; left out: 4 BatchNorm num_batches_tracked "
                            "counters (kiln's BN momentum is fixed)\n",
                            "test accuracy: "},
                           "--init-from a state_dict");

  const std::string extra = dir.file("extra.safetensors");
  write_state_dict(extra, {{"conv1.steps", "I64", {2}, testing::le_bytes(std::vector<int64_t>{1, 2})}});
  const Result refused = kiln(run + extra);
  EXPECT_NE(refused.rc, 0);
  testing::expect_contains(refused, {extra, "nothing was loaded", "not used: 'conv1.steps' I64 [2]"},
                           "--init-from a file with another int64 tensor");
  EXPECT_EQ(refused.output.find("epoch 1"), std::string::npos) << refused.output;
  EXPECT_EQ(refused.output.find("num_batches_tracked"), std::string::npos) << refused.output;
}

}  // namespace
}  // namespace kiln
