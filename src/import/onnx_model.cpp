#include "import/onnx_model.h"

#include <fmt/format.h>

#include <cstring>

#include "core/half_bits.h"

namespace kiln::onnx_import {

std::vector<double> OnnxTensor::values() const {
  std::vector<double> out;
  if (integer) return std::vector<double>(ints.begin(), ints.end());
  if (!floating) return out;
  const size_t n = size_t(count());
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::byte* p = data.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::F32: {
        float f;
        std::memcpy(&f, p, sizeof f);
        out[i] = f;
        break;
      }
      case DType::F64:
        std::memcpy(&out[i], p, sizeof(double));
        break;
      case DType::F16:
      case DType::BF16: {
        uint16_t bits;
        std::memcpy(&bits, p, sizeof bits);
        out[i] = dtype == DType::F16 ? half_bits_to_double(bits) : bf16_bits_to_double(bits);
        break;
      }
      default:
        break;  // the reader stores only the four floating dtypes here
    }
  }
  return out;
}

const char* attribute_type_name(OnnxAttribute::Type type) {
  switch (type) {
    case OnnxAttribute::Type::Float: return "FLOAT";
    case OnnxAttribute::Type::Int: return "INT";
    case OnnxAttribute::Type::String: return "STRING";
    case OnnxAttribute::Type::Tensor: return "TENSOR";
    case OnnxAttribute::Type::Floats: return "FLOATS";
    case OnnxAttribute::Type::Ints: return "INTS";
    case OnnxAttribute::Type::Strings: return "STRINGS";
    case OnnxAttribute::Type::Other: return "a graph or other type";
  }
  return "?";
}

const OnnxAttribute* OnnxNode::attribute(const std::string& attribute_name) const {
  for (const OnnxAttribute& a : attributes)
    if (a.name == attribute_name) return &a;
  return nullptr;
}

const std::string& OnnxNode::input(size_t k) const {
  static const std::string none;
  return k < inputs.size() ? inputs[k] : none;
}

std::string node_label(const OnnxNode& node) {
  const std::string& name = !node.name.empty() ? node.name : !node.outputs.empty() ? node.outputs[0] : node.name;
  return fmt::format("{} node '{}'", node.op_type, name);
}

}  // namespace kiln::onnx_import
