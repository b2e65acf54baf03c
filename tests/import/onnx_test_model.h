#pragma once
// Small ONNX models written by the import tests with the ONNX library's protobuf classes (not torch,
// which CI does not have): an NCHW float input, nodes, initializers drawn at random, one output.
// Built only where cmake/onnx.cmake finds the library (KILN_TEST_ONNX_PROTOBUF).
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::testing {

// A node attribute, written as ONNX's AttributeProto.
struct OnnxAttr {
  onnx::AttributeProto proto;
  static OnnxAttr i(const std::string& name, int64_t v) {
    OnnxAttr a;
    a.proto.set_name(name), a.proto.set_type(onnx::AttributeProto::INT), a.proto.set_i(v);
    return a;
  }
  static OnnxAttr f(const std::string& name, float v) {
    OnnxAttr a;
    a.proto.set_name(name), a.proto.set_type(onnx::AttributeProto::FLOAT), a.proto.set_f(v);
    return a;
  }
  static OnnxAttr ints(const std::string& name, std::vector<int64_t> v) {
    OnnxAttr a;
    a.proto.set_name(name), a.proto.set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a.proto.add_ints(x);
    return a;
  }
  static OnnxAttr s(const std::string& name, const std::string& v) {
    OnnxAttr a;
    a.proto.set_name(name), a.proto.set_type(onnx::AttributeProto::STRING), a.proto.set_s(v);
    return a;
  }
};

class OnnxTestModel {
 public:
  // Input "input" [N, C, H, W] (N symbolic unless batch > 0) at `opset`, seeded draws.
  OnnxTestModel(int64_t c, int64_t h, int64_t w, uint32_t seed, int opset = 17, int64_t batch = 0) : rng_(seed) {
    model_.set_ir_version(8);
    model_.set_producer_name("kiln-import-test");
    onnx::OperatorSetIdProto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    graph()->set_name("test_graph");
    onnx::ValueInfoProto* in = graph()->add_input();
    in->set_name("input");
    auto* t = in->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    if (batch > 0) t->mutable_shape()->add_dim()->set_dim_value(batch);
    else t->mutable_shape()->add_dim()->set_dim_param("N");
    for (int64_t d : {c, h, w}) t->mutable_shape()->add_dim()->set_dim_value(d);
  }

  onnx::GraphProto* graph() { return model_.mutable_graph(); }
  onnx::ModelProto& proto() { return model_; }
  const onnx::ModelProto& proto() const { return model_; }

  // A float32 initializer of these values.
  std::string tensor(const std::string& name, const Shape& shape, const std::vector<float>& values) {
    onnx::TensorProto* t = graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape) t->add_dims(d);
    std::string raw(values.size() * 4, '\0');
    std::memcpy(raw.data(), values.data(), raw.size());
    t->set_raw_data(raw);
    return name;
  }
  // Values ~ N(mean, std^2), or U(lo, hi) with uniform().
  std::string normal(const std::string& name, const Shape& shape, float std = 1.f, float mean = 0.f) {
    std::normal_distribution<float> d(mean, std);
    std::vector<float> v(size_t(numel(shape)));
    for (float& x : v) x = d(rng_);
    return tensor(name, shape, v);
  }
  std::string uniform(const std::string& name, const Shape& shape, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(size_t(numel(shape)));
    for (float& x : v) x = d(rng_);
    return tensor(name, shape, v);
  }
  std::string scalar(const std::string& name, float v) { return tensor(name, {}, {v}); }
  std::string int64s(const std::string& name, const std::vector<int64_t>& v, bool as_vector = true) {
    onnx::TensorProto* t = graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    if (as_vector) t->add_dims(int64_t(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return name;
  }

  // A convolution's weight (He-scaled, so activations stay near unit scale) and bias.
  std::string conv_weight(const std::string& name, int64_t out, int64_t in, int64_t kh, int64_t kw) {
    return normal(name, {out, in, kh, kw}, std::sqrt(2.f / float(in * kh * kw)));
  }
  // BatchNorm's four tensors under "<module>.weight", ".bias", ".running_mean", ".running_var".
  std::vector<std::string> batch_norm(const std::string& module, int64_t c) {
    return {uniform(module + ".weight", {c}, 0.5f, 1.5f), uniform(module + ".bias", {c}, -0.5f, 0.5f),
            uniform(module + ".running_mean", {c}, -0.5f, 0.5f), uniform(module + ".running_var", {c}, 0.5f, 2.f)};
  }

  // Adds a node named `output` writing `output`; returns it.
  std::string node(const std::string& op, const std::vector<std::string>& inputs, const std::string& output,
                   const std::vector<OnnxAttr>& attrs = {}, const std::vector<std::string>& extra_outputs = {}) {
    onnx::NodeProto* n = graph()->add_node();
    n->set_op_type(op);
    n->set_name(output);
    for (const std::string& i : inputs) n->add_input(i);
    n->add_output(output);
    for (const std::string& o : extra_outputs) n->add_output(o);
    for (const OnnxAttr& a : attrs) *n->add_attribute() = a.proto;
    return output;
  }

  // The graph's output: float32 [N, classes].
  void output(const std::string& value, int64_t classes) {
    onnx::ValueInfoProto* out = graph()->add_output();
    out->set_name(value);
    auto* t = out->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_param("N");
    t->mutable_shape()->add_dim()->set_dim_value(classes);
  }

  void metadata(const std::string& key, const std::string& value) {
    onnx::StringStringEntryProto* e = model_.add_metadata_props();
    e->set_key(key), e->set_value(value);
  }

  std::string bytes() const {
    std::string s;
    model_.SerializeToString(&s);
    return s;
  }
  void save(const std::string& path) const { std::ofstream(path, std::ios::binary) << bytes(); }

  std::mt19937& rng() { return rng_; }

 private:
  onnx::ModelProto model_;
  std::mt19937 rng_;
};

}  // namespace kiln::testing
