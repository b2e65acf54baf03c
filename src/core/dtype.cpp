#include "kiln/dtype.h"

#include "kiln/error.h"

namespace kiln {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::U8: return 1;
    case DType::I32: return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::U8: return "U8";
    case DType::I32: return "I32";
  }
  return "?";
}

const char* device_name(Device device) { return device == Device::CPU ? "cpu" : "cuda"; }

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::FP32: return "fp32";
    case Precision::FP64: return "fp64";
    case Precision::FP16: return "fp16";
    case Precision::BF16: return "bf16";
  }
  return "?";
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::CPU;
  if (text == "cuda" || text == "gpu") return Device::CUDA;
  fail("unknown device '{}': use 'cpu' or 'cuda'", text);
}

DeviceSpec parse_device_spec(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return {parse_device(text), 0};
  const std::string name = text.substr(0, colon), number = text.substr(colon + 1);
  const bool digits = !number.empty() && number.size() < 4 &&
                      number.find_first_not_of("0123456789") == std::string::npos;
  if (parse_device(name) != Device::CUDA || !digits)
    fail("unknown device '{}': use 'cpu', 'cuda' or 'cuda:N' with N the GPU's number", text);
  return {Device::CUDA, std::stoi(number)};
}

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::FP32;
  if (text == "fp64") return Precision::FP64;
  if (text == "fp16") return Precision::FP16;
  if (text == "bf16") return Precision::BF16;
  fail("unknown precision '{}': use fp32, fp16, bf16 (or fp64 on cpu)", text);
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace kiln
