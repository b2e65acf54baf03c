// Built against kiln::cpu (tests/install/install_test.cmake): trains a tiny CNN for one epoch on
// random in-memory images, evaluates it, and checks that this library has no CUDA backend (no GPU
// counted, a CUDA device refused with the reason). Exit status 0 when all of that holds.
#include <cstdio>
#include <random>
#include <string>

#include "kiln/kiln.h"

int main() {
  if (kiln::cuda_device_count() != 0) {
    std::fprintf(stderr, "kiln::cpu counts %d CUDA devices; expected 0\n", kiln::cuda_device_count());
    return 1;
  }
  kiln::Blueprint m("tiny");
  m.input(8, 8, 1).conv(4, 3, 1, 1).bn().relu().maxpool(2, 2).flatten().fc(3);

  kiln::Dataset data;
  data.count = 64;
  data.height = data.width = 8;
  data.channels = 1;
  data.num_classes = 3;
  std::mt19937 rng(1);
  data.images.resize(data.count * data.image_size());
  for (auto& p : data.images) p = static_cast<uint8_t>(rng() & 255);
  for (int64_t i = 0; i < data.count; ++i) data.labels.push_back(static_cast<int32_t>(i % 3));

  kiln::CompileOptions c;  // the CPU
  c.batch = 16;
  kiln::TrainOptions t;
  t.epochs = 1;
  try {
    kiln::Trainer trainer(m, c, t);
    const auto reports = trainer.fit(data, data);
    const double accuracy = trainer.evaluate(data);
    std::printf("kiln::cpu: trained %zu epoch of %lld samples on the CPU, accuracy %.4f\n", reports.size(),
                static_cast<long long>(data.count), accuracy);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "training on the CPU failed: %s\n", e.what());
    return 1;
  }

  c.device = kiln::Device::CUDA;
  try {
    kiln::Trainer gpu(m, c, t);
    std::fprintf(stderr, "kiln::cpu accepted a CUDA device\n");
    return 1;
  } catch (const kiln::Error& e) {
    if (std::string(e.what()).find("no CUDA backend") == std::string::npos) {
      std::fprintf(stderr, "a CUDA device was refused with an unexpected message: %s\n", e.what());
      return 1;
    }
    std::printf("kiln::cpu: a CUDA device is refused: %s\n", e.what());
  }
  return 0;
}
