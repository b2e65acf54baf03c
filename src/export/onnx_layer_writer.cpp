#include "export/onnx_layer_writer.h"

#include "export/weight_layouts.h"
#include "kiln/torch_weights.h"

namespace kiln {

OnnxLayerWriter::OnnxLayerWriter(Executable& exe, const OnnxExportOptions& options, onnx_export::Graph& graph)
    : exe_(exe), options_(options), graph_(exe.program().graph), out_(graph), torch_(torch_names(exe.program())),
      value_(graph_.layers.size()) {}

const std::string& OnnxLayerWriter::input(int layer, size_t k) const {
  const Layer& l = this->layer(layer);
  return l.inputs.empty() ? value_.at(0) : value_.at(size_t(l.inputs.at(k)));
}

std::string OnnxLayerWriter::node(const std::string& op_type, std::vector<std::string> inputs,
                                  const std::string& output, std::vector<onnx_export::Attribute> attributes) {
  return out_.node(op_type, std::move(inputs), output, std::move(attributes));
}

std::string OnnxLayerWriter::scalar(float value) { return out_.scalar(value); }

std::string& OnnxLayerWriter::metadata(const std::string& key) { return out_.metadata(key); }

Shape OnnxLayerWriter::tensor_shape(const std::string& tensor) const {
  return exe_.program().tensors.at(size_t(exe_.id(tensor))).shape;
}

std::vector<float> OnnxLayerWriter::read(const std::string& tensor) { return export_layout::read_floats(exe_, tensor); }

std::string OnnxLayerWriter::weight(const std::string& kiln_name, Shape shape, std::vector<float> values) {
  std::string name = kiln_name;
  if (auto it = torch_.find(kiln_name); it != torch_.end()) {
    name = it->second;
  } else if (const size_t dot = kiln_name.rfind('.'); dot != std::string::npos) {
    // A folded bias: the convolution has none in kiln; PyTorch's would sit beside its weight.
    auto weight = torch_.find(kiln_name.substr(0, dot) + ".weight");
    if (weight != torch_.end()) name = weight->second.substr(0, weight->second.rfind('.')) + kiln_name.substr(dot);
  }
  out_.initializer(name, std::move(shape), std::move(values));
  return name;
}

void OnnxLayerWriter::absorb(int consumer, std::string value) {
  absorbed_.insert(consumer);
  set_value(consumer, std::move(value));
}

std::vector<onnx_export::Attribute> window_attributes(int kernel_h, int kernel_w, int stride_h, int stride_w,
                                                      int pad_top, int pad_left, int pad_bottom, int pad_right) {
  using A = onnx_export::Attribute;
  return {A::integers("kernel_shape", {kernel_h, kernel_w}), A::integers("strides", {stride_h, stride_w}),
          A::integers("pads", {pad_top, pad_left, pad_bottom, pad_right})};
}

}  // namespace kiln
