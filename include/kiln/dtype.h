#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

enum class DType : uint8_t { F32, F64, F16, BF16, U8, I32 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

enum class Device : uint8_t { CPU, CUDA };
// Activation/compute precision of a compiled program. FP64 exists on CPU so that
// gradient checks can run the real program against float64 finite differences.
enum class Precision : uint8_t { FP32, FP64, FP16, BF16 };

const char* device_name(Device device);
const char* precision_name(Precision precision);
Device parse_device(const std::string& text);        // throws kiln::Error naming the option
// "cpu", "cuda" (GPU 0) or "cuda:N": the device and the GPU's ordinal (0 on cpu).
struct DeviceSpec {
  Device device = Device::CPU;
  int index = 0;
};
DeviceSpec parse_device_spec(const std::string& text);  // throws kiln::Error naming the option
Precision parse_precision(const std::string& text);  // throws kiln::Error naming the option

// Shapes are NHWC for feature maps, (N, F) for flat activations, KRSC for conv filters.
using Shape = std::vector<int64_t>;
int64_t numel(const Shape& shape);
std::string shape_str(const Shape& shape);

}  // namespace kiln
