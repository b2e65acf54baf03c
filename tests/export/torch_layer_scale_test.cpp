// LayerScale's parameter in PyTorch's state_dict: a layer named as torchvision's ConvNeXt block
// ("features.1.0") carries "features.1.0.layer_scale", shaped (C, 1, 1) as torchvision's
// nn.Parameter(torch.ones(dim, 1, 1) * layer_scale) (and (C) on flat rows); export_torch_weights
// writes it as it is, load_torch_weights reads it back into a fresh program value for value, and a
// file whose scale has another shape is refused, naming the tensor and both shapes.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/export.h"
#include "kiln/safetensors.h"
#include "kiln/torch_weights.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

// A block's scale on a 4 x 5 x 8 map, and one on the head's 6 rows.
Blueprint scaled_model() {
  Blueprint m("layer_scale");
  m.input(4, 5, 3).conv(8, 3, 1, 1, true, "features.0").layer_scale(1e-6f, "features.1.0");
  m.flatten("flatten").fc(6, true, "fc").layer_scale(0.5f, "head_scale");
  return m;
}

std::vector<float> floats_of(const NamedTensor& t) {
  std::vector<float> v(t.data.size() / sizeof(float));
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

Executable compiled(uint64_t seed) {
  CompileOptions o;
  o.batch = 2, o.loss = false;
  return Executable(compile(scaled_model(), o), seed);
}

TEST(TorchLayerScale, ExportAndLoadKeepTheNameShapeAndValues) {
  Executable exe = compiled(1);
  EXPECT_EQ(torch_names(exe.program()).at("features.1.0.layer_scale"), "features.1.0.layer_scale");
  EXPECT_EQ(torch_names(exe.program()).at("head_scale.layer_scale"), "head_scale.layer_scale");
  const std::map<std::string, Shape> shapes = {{"features.1.0.layer_scale", {8, 1, 1}},
                                               {"head_scale.layer_scale", {6}}};
  std::map<std::string, std::vector<float>> written;
  uint32_t seed = 5;
  for (const auto& [name, shape] : shapes) {
    written[name] = random_floats(size_t(numel(shape)), seed++);
    exe.write(exe.id(name), written[name].data(), written[name].size() * sizeof(float));
  }
  testing::TempDir dir;
  const std::string file = dir.file("layer_scale.safetensors");
  export_torch_weights(exe, file);
  const SafetensorsFile saved = load_safetensors(file);
  for (const auto& [name, shape] : shapes) {
    const NamedTensor* t = saved.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, shape) << name;
    EXPECT_EQ(t->dtype, DType::F32) << name;
    EXPECT_EQ(floats_of(*t), written[name]) << name;
  }

  Executable fresh = compiled(2);  // its scales at their initial 1e-6 and 0.5 until the file is loaded
  ASSERT_NE(fresh.read<float>(fresh.id("features.1.0.layer_scale")), written["features.1.0.layer_scale"]);
  const TorchWeightsLoaded loaded = load_torch_weights(fresh, file);
  EXPECT_EQ(loaded.tensors, int(torch_names(fresh.program()).size()));
  for (const auto& [name, shape] : shapes) EXPECT_EQ(fresh.read<float>(fresh.id(name)), written[name]) << name;
  const std::vector<float> x = random_floats(2 * 4 * 5 * 3, 9);
  for (Executable* e : {&exe, &fresh}) e->write(e->program().input, x.data(), x.size() * sizeof(float));
  exe.run_inference({});
  fresh.run_inference({});
  EXPECT_EQ(fresh.read<float>(fresh.program().inference_logits), exe.read<float>(exe.program().inference_logits));
}

// A state_dict whose block scale is (8) where the map's needs (8, 1, 1) does not fit: nothing is
// loaded, and the error names PyTorch's tensor, its shape and the one kiln needs.
TEST(TorchLayerScale, AScaleOfAnotherShapeIsRefused) {
  Executable exe = compiled(1);
  testing::TempDir dir;
  const std::string file = dir.file("layer_scale.safetensors");
  export_torch_weights(exe, file);
  SafetensorsFile saved = load_safetensors(file);
  for (NamedTensor& t : saved.tensors)
    if (t.name == "features.1.0.layer_scale") t.shape = {8};
  const std::string flat = dir.file("flat_scale.safetensors");
  save_safetensors(flat, saved.tensors, saved.metadata);
  Executable fresh = compiled(2);
  const std::vector<float> before = fresh.read<float>(fresh.id("fc.weight"));
  testing::expect_error([&] { load_torch_weights(fresh, flat); },
                        {"'features.1.0.layer_scale' is " + shape_str({8}), shape_str({8, 1, 1}), "nothing was loaded"});
  EXPECT_EQ(fresh.read<float>(fresh.id("fc.weight")), before);
}

}  // namespace
}  // namespace kiln
