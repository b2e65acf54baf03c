#pragma once
// An ONNX file as the importer reads it: its graph's nodes, attributes, initializers, inputs and
// outputs and the model's metadata in plain structs, without the ONNX library's protobuf classes.
// Only the file reader (onnx_file_reader.cpp) touches the library; everything after it (ordering,
// constant folding, the patterns, the op mapping) builds and runs on these, with or without it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::onnx_import {

// A tensor of the file: an initializer, or a Constant node's value. Floating-point tensors keep
// their bytes as the file stores them (little-endian F32, F64, F16 or BF16: the weights keep their
// precision until load_torch_weights reads them); integer and boolean tensors are widened to int64
// (shapes, axes, indices). Others (strings, complex numbers, 8-bit floats) carry only their type.
struct OnnxTensor {
  std::string name;
  Shape dims;
  int32_t elem_type = 0;  // ONNX's TensorProto.DataType
  bool floating = false;  // dtype and data hold it
  bool integer = false;   // ints holds it
  DType dtype = DType::F32;
  std::vector<std::byte> data;
  std::vector<int64_t> ints;

  int64_t count() const { return numel(dims); }
  // The values as double (floating or integer tensors; empty for others).
  std::vector<double> values() const;
};

struct OnnxAttribute {
  enum class Type { Float, Int, String, Tensor, Floats, Ints, Strings, Other };
  std::string name;
  Type type = Type::Other;
  float f = 0;
  int64_t i = 0;
  std::string s;
  std::shared_ptr<const OnnxTensor> tensor;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
};

// ONNX's names for its attribute types ("INT", "FLOATS", ...), for messages.
const char* attribute_type_name(OnnxAttribute::Type type);

struct OnnxNode {
  std::string name;  // may be empty in the file
  std::string op_type;
  std::string domain;  // "" (or "ai.onnx") for ONNX's own operators
  std::vector<std::string> inputs;  // "" for an optional input left out
  std::vector<std::string> outputs;
  std::vector<OnnxAttribute> attributes;
  // The PyTorch modules the node was computed in, as a scoped name ("/features/features.1/conv/
  // conv.0/conv2d"), where the dynamo exporter left them in the node's metadata
  // (pkg.torch.onnx.name_scopes) and the node's own name says nothing of them ("node_conv2d_3").
  std::string scope;

  const OnnxAttribute* attribute(const std::string& attribute_name) const;
  // The input at `k`, or "" when the node has fewer or leaves it out.
  const std::string& input(size_t k) const;
};

// How messages name a node: "Conv node '/layer1/conv1/Conv'" (or its first output where it has no name).
std::string node_label(const OnnxNode& node);

// A graph input's or output's declared type: its element type and dimensions (a number, a
// symbolic name, or neither).
struct OnnxDim {
  int64_t value = -1;  // -1: not a number
  std::string param;   // the symbolic name, if any
};
struct OnnxValueInfo {
  std::string name;
  int32_t elem_type = 0;
  bool has_shape = false;
  std::vector<OnnxDim> dims;
};

struct OnnxModel {
  std::string path;  // for messages
  int64_t ir_version = 0;
  int64_t opset = -1;  // of ONNX's own operators (domain "" or "ai.onnx"); -1 when the file declares none
  std::string producer_name, producer_version, graph_name;
  std::vector<OnnxNode> nodes;  // in the file's order
  std::vector<OnnxTensor> initializers;
  std::vector<OnnxValueInfo> inputs;  // as declared: may include initializers (files of IR version < 4)
  std::vector<OnnxValueInfo> outputs;
  std::map<std::string, std::string> metadata;  // metadata_props
};

inline constexpr int32_t kOnnxFloat = 1;  // TensorProto.DataType FLOAT

}  // namespace kiln::onnx_import
