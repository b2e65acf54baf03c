// The exported graph through the ONNX library (Debian's libonnx-dev): its protobuf classes build the
// ModelProto, its checker and shape inference vet it, protobuf serializes it. Compiled only where
// cmake/onnx.cmake finds the library; onnx_unavailable.cpp stands in otherwise.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <climits>
#include <cstring>
#include <span>

#include "core/file_io.h"
#include "export/onnx_graph.h"
#include "kiln/checkpoint.h"
#include "kiln/error.h"

namespace kiln::onnx_export {
namespace {

// A float32 value of shape [N, dims...], N symbolic.
void batch_value(onnx::ValueInfoProto& v, const std::string& name, const Shape& dims) {
  v.set_name(name);
  onnx::TypeProto_Tensor* tensor = v.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx::TensorProto::FLOAT);
  onnx::TensorShapeProto* shape = tensor->mutable_shape();
  shape->add_dim()->set_dim_param("N");
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

void tensor(onnx::TensorProto& t, const Initializer& init) {
  t.set_name(init.name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : init.shape) t.add_dims(d);
  // raw_data is little-endian, as kiln's (x86-64) floats are.
  std::string bytes(init.values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), init.values.data(), bytes.size());
  t.set_raw_data(std::move(bytes));
}

void node(onnx::NodeProto& n, const Node& from) {
  n.set_op_type(from.op_type);
  n.set_name(from.name);
  for (const std::string& in : from.inputs) n.add_input(in);
  for (const std::string& out : from.outputs) n.add_output(out);
  for (const Attribute& a : from.attributes) {
    onnx::AttributeProto* p = n.add_attribute();
    p->set_name(a.name);
    switch (a.kind) {
      case Attribute::Kind::Int:
        p->set_type(onnx::AttributeProto::INT);
        p->set_i(a.i);
        break;
      case Attribute::Kind::Ints:
        p->set_type(onnx::AttributeProto::INTS);
        for (int64_t v : a.ints) p->add_ints(v);
        break;
      case Attribute::Kind::Float:
        p->set_type(onnx::AttributeProto::FLOAT);
        p->set_f(a.f);
        break;
    }
  }
}

onnx::ModelProto model_proto(const Graph& g) {
  onnx::ModelProto model;
  model.set_ir_version(onnx::IR_VERSION);
  model.set_producer_name("kiln");
  model.set_producer_version(kVersion);
  model.set_doc_string(g.doc);
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  for (const auto& [key, value] : g.metadata) {
    onnx::StringStringEntryProto* entry = model.add_metadata_props();
    entry->set_key(key);
    entry->set_value(value);
  }
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name(g.name);
  batch_value(*graph->add_input(), kInputName, g.input_chw);
  batch_value(*graph->add_output(), kOutputName, {g.classes});
  for (const Initializer& init : g.initializers) tensor(*graph->add_initializer(), init);
  for (const Node& n : g.nodes) node(*graph->add_node(), n);
  return model;
}

}  // namespace

int64_t write_onnx_model(const Graph& g, const std::string& path) {
  onnx::ModelProto model = model_proto(g);
  // An invalid model here is the exporter's bug, not the user's: say so, and write nothing.
  try {
    onnx::checker::check_model(model);
    // Strict shape inference, on a copy (the file need not carry every intermediate's shape): a node
    // whose inputs do not fit, or a result that is not the declared [N, classes], throws.
    onnx::ModelProto inferred = model;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type=*/true, /*error_mode=*/1));
  } catch (const std::exception& e) {
    fail("internal: the ONNX model kiln built for '{}' does not pass the ONNX checker ({}); nothing was written. "
         "Please report it with the model", path, e.what());
  }
  const size_t bytes = model.ByteSizeLong();
  if (bytes > size_t(INT_MAX))
    fail("the ONNX model for '{}' would take {:.2f} GiB, over protobuf's 2 GiB limit for one file; kiln does not write "
         "ONNX external data", path, double(bytes) / double(1 << 30));
  std::string serialized;
  if (!model.SerializeToString(&serialized)) fail("internal: protobuf could not serialize the ONNX model for '{}'", path);
  const auto* data = reinterpret_cast<const std::byte*>(serialized.data());
  write_file_atomic(path, {std::span<const std::byte>(data, serialized.size())});
  return int64_t(serialized.size());
}

void require_onnx_library(const std::string&) {}

}  // namespace kiln::onnx_export

namespace kiln {
bool onnx_export_available() { return true; }
}  // namespace kiln
