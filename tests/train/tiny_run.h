#pragma once
// A model and a dataset small enough that a training run takes milliseconds, for the trainer's
// checkpoint and divergence tests (tests/train/).
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kiln/trainer.h"

namespace kiln::testing {

// `count` 8x8 grey images in 3 classes; the class sets the brightness, so there is something
// to learn.
inline Dataset tiny_dataset(int64_t count = 64, uint32_t seed = 5) {
  Dataset d;
  d.count = count, d.height = 8, d.width = 8, d.channels = 1, d.num_classes = 3;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> noise(0, 80);
  for (int64_t i = 0; i < count; ++i) {
    const int label = int(i % 3);
    d.labels.push_back(label);
    for (int64_t p = 0; p < d.image_size(); ++p) d.images.push_back(uint8_t(label * 80 + noise(rng)));
  }
  return d;
}

inline Blueprint tiny_model(const std::string& name = "tiny") {
  Blueprint m(name);
  m.input(8, 8, 1).conv(4, 3, 1, 1, false, "conv1").bn("bn1").relu("relu1").maxpool(2, 2, 0, "pool1");
  m.flatten("flatten").fc(3, true, "fc");
  return m;
}

inline CompileOptions tiny_compile(const std::string& optimizer = "sgd", int batch = 16) {
  CompileOptions c;
  c.batch = batch;
  c.optimizer.name = optimizer;
  return c;
}

inline TrainOptions tiny_train(int epochs, const std::string& checkpoint = {}) {
  TrainOptions t;
  t.epochs = epochs;
  t.schedule.lr = 0.05f;
  t.seed = 1;
  t.workers = 0;
  t.checkpoint = checkpoint;
  return t;
}

// The names of the files in `dir`, sorted.
inline std::vector<std::string> file_names(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kiln::testing
