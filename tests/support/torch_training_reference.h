#pragma once
// What the tests that train kiln's zoo models beside PyTorch share (tests/gpu/
// whole_network_equivalence_gpu_test.cpp, digits_curve_gpu_test.cpp; PyTorch's side is
// bench/torch_training_reference.py): PyTorch's initial weights for a zoo model, and tensors read
// back as fp32 whatever their dtype.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/checkpoint.h"
#include "kiln/executable.h"
#include "support/gpu_test_util.h"
#include "support/half_host.h"

namespace kiln::gpu_test {

inline constexpr const char* kTrainingReference = "torch_training_reference.py";

inline NamedTensor i32_tensor(const std::string& name, const std::vector<int32_t>& v, Shape shape) {
  NamedTensor t{name, DType::I32, std::move(shape), std::vector<std::byte>(v.size() * 4)};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

#ifdef KILN_SOURCE_DIR
// PyTorch's model of zoo model `model` for side x side inputs, initialized with torch.manual_seed(seed)
// and its BatchNorm statistics and affine parameters drawn away from their defaults, as a state_dict
// kiln::load_torch_weights reads: the file's path, <temp>/<folder>/<stem>.weights.safetensors.
inline std::string torch_initial_weights(const std::string& folder, const std::string& stem, const std::string& model,
                                         int side, int seed) {
  const std::string path =
      (std::filesystem::temp_directory_path() / folder / (stem + ".weights.safetensors")).string();
  torch_reference(kTrainingReference, folder, stem + ".init", {f32_tensor("unused", {0.f})},
                  {{"mode", "init"}, {"model", model}, {"side", std::to_string(side)}, {"seed", std::to_string(seed)},
                   {"weights", path}});
  return path;
}
#endif

// Tensor `id` (F32, F64, F16 or BF16), its values widened to double.
inline std::vector<double> read_values(Executable& exe, int id) {
  const TensorSpec& t = exe.program().tensors.at(size_t(id));
  if (t.dtype == DType::F64) return exe.read<double>(id);
  std::vector<std::byte> bytes(t.bytes());
  exe.read(id, bytes.data(), bytes.size());
  return testing::decode<double>(t.dtype, bytes);
}

// The F32 or F64 tensor `name` of a file a reference script wrote, widened to double (empty, and a
// failure, when it has none).
inline std::vector<double> values(const SafetensorsFile& f, const std::string& name) {
  const NamedTensor* t = f.find(name);
  if (!t || (t->dtype != DType::F32 && t->dtype != DType::F64)) {
    ADD_FAILURE() << "PyTorch output lacks an fp32 or fp64 tensor " << name;
    return {};
  }
  if (t->dtype == DType::F32) {
    const std::vector<float> v = testing::decode<float>(DType::F32, t->data);
    return {v.begin(), v.end()};
  }
  std::vector<double> v(t->data.size() / sizeof(double));
  std::memcpy(v.data(), t->data.data(), t->data.size());
  return v;
}

}  // namespace kiln::gpu_test
