// The ONNX file through the ONNX library's protobuf classes (Debian's libonnx-dev): protobuf parses
// the bytes, and each part the importer uses is copied into its plain structs, checked as it goes.
// The library's checker is not run: it knows the opsets of its own release (17 for 1.12), and files
// from newer exporters are fine for the operators kiln reads. Compiled only where cmake/onnx.cmake
// finds the library; onnx_import_unavailable.cpp stands in otherwise.
#include <google/protobuf/unknown_field_set.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "import/onnx_file_reader.h"
#include "kiln/error.h"
#include "kiln/onnx_import.h"

namespace kiln::onnx_import {
namespace {

constexpr const char* kExportAgain = "export the model again (torch.onnx.export) and check that the copy is whole";

// Elements of `dims`, refusing negative dimensions and counts past 2^40 (no CNN has a tensor of a
// trillion values: such a shape is damage).
int64_t checked_count(const Shape& dims, const std::string& path, const std::string& tensor) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > (int64_t(1) << 40) / d))
      fail("'{}': tensor '{}' has the shape {}, which no model holds: the file is damaged; {}", path, tensor,
           shape_str(dims), kExportAgain);
    n *= d;
  }
  return n;
}

// Bytes of one element of an ONNX integer or boolean type in raw_data; 0 for another type.
size_t integer_size(int32_t type) {
  switch (type) {
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::BOOL: return 1;
    case onnx::TensorProto::INT16:
    case onnx::TensorProto::UINT16: return 2;
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::UINT32: return 4;
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::UINT64: return 8;
    default: return 0;
  }
}

int64_t raw_integer(const char* p, int32_t type) {
  switch (type) {
    case onnx::TensorProto::INT8: return int8_t(*p);
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::BOOL: return uint8_t(*p);
    case onnx::TensorProto::INT16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case onnx::TensorProto::UINT16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case onnx::TensorProto::INT32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case onnx::TensorProto::UINT32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    default: { int64_t v; std::memcpy(&v, p, 8); return v; }  // INT64, UINT64 (past 2^63: no shape or axis)
  }
}

OnnxTensor tensor_of(const onnx::TensorProto& t, const std::string& path, const std::string& fallback_name,
                     ExternalData& external) {
  OnnxTensor out;
  out.name = t.name().empty() ? fallback_name : t.name();
  out.elem_type = t.data_type();
  for (int64_t d : t.dims()) out.dims.push_back(d);
  if (t.has_segment())
    fail("'{}': tensor '{}' is stored in segments, which kiln does not read; save the model whole (onnx.save_model)",
         path, out.name);
  const int64_t n = checked_count(out.dims, path, out.name);
  const bool outside = t.data_location() == onnx::TensorProto::EXTERNAL;
  std::string external_raw;
  if (outside) {
    std::string location, offset, length;
    for (const auto& entry : t.external_data()) {
      if (entry.key() == "location") location = entry.value();
      if (entry.key() == "offset") offset = entry.value();
      if (entry.key() == "length") length = entry.value();
    }
    const size_t element = t.data_type() == onnx::TensorProto::FLOAT || t.data_type() == onnx::TensorProto::INT32 ||
                                   t.data_type() == onnx::TensorProto::UINT32
                               ? 4
                           : t.data_type() == onnx::TensorProto::DOUBLE || t.data_type() == onnx::TensorProto::INT64 ||
                                   t.data_type() == onnx::TensorProto::UINT64
                               ? 8
                           : t.data_type() == onnx::TensorProto::FLOAT16 || t.data_type() == onnx::TensorProto::BFLOAT16 ||
                                   t.data_type() == onnx::TensorProto::INT16 || t.data_type() == onnx::TensorProto::UINT16
                               ? 2
                               : 1;
    external_raw = external.read(out.name, location, offset, length, size_t(n) * element);
  }
  const std::string& raw = outside ? external_raw : t.raw_data();
  const bool has_raw = outside || t.has_raw_data();
  auto wrong_size = [&](size_t have, size_t element) {
    fail("'{}': tensor '{}' of shape {} needs {} values but holds {}: the file is damaged or truncated; {}", path,
         out.name, shape_str(out.dims), n, element ? have / element : have, kExportAgain);
  };
  auto floating = [&](DType dtype) {
    out.floating = true;
    out.dtype = dtype;
    // Sizes are checked before anything is allocated: a damaged shape may claim terabytes.
    const size_t bytes = size_t(n) * dtype_size(dtype);
    if (has_raw) {
      if (raw.size() != bytes) wrong_size(raw.size(), dtype_size(dtype));
      out.data.resize(bytes);
      if (bytes) std::memcpy(out.data.data(), raw.data(), bytes);
      return;
    }
    const int stored = dtype == DType::F32 ? t.float_data_size() : dtype == DType::F64 ? t.double_data_size()
                                                                                        : t.int32_data_size();
    if (stored != n) wrong_size(size_t(stored), 0);
    out.data.resize(bytes);
    switch (dtype) {
      case DType::F32:
        if (n) std::memcpy(out.data.data(), t.float_data().data(), bytes);
        break;
      case DType::F64:
        if (n) std::memcpy(out.data.data(), t.double_data().data(), bytes);
        break;
      default:  // F16, BF16: the low 16 bits of each int32_data entry
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t bits = uint16_t(t.int32_data(int(i)));
          std::memcpy(out.data.data() + 2 * i, &bits, 2);
        }
        break;
    }
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: floating(DType::F32); return out;
    case onnx::TensorProto::DOUBLE: floating(DType::F64); return out;
    case onnx::TensorProto::FLOAT16: floating(DType::F16); return out;
    case onnx::TensorProto::BFLOAT16: floating(DType::BF16); return out;
    default: break;
  }
  const size_t element = integer_size(t.data_type());
  if (element == 0) return out;  // strings, complex numbers, newer types: the type alone
  out.integer = true;
  const bool int64 = t.data_type() == onnx::TensorProto::INT64;
  const bool uint64 = t.data_type() == onnx::TensorProto::UINT32 || t.data_type() == onnx::TensorProto::UINT64;
  if (has_raw) {
    if (raw.size() != size_t(n) * element) wrong_size(raw.size(), element);
  } else {
    const int stored = int64 ? t.int64_data_size() : uint64 ? t.uint64_data_size() : t.int32_data_size();
    if (stored != n) wrong_size(size_t(stored), 0);
  }
  out.ints.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    out.ints[size_t(i)] = has_raw ? raw_integer(raw.data() + i * int64_t(element), t.data_type())
                          : int64           ? t.int64_data(int(i))
                          : uint64          ? int64_t(t.uint64_data(int(i)))
                                            : int64_t(t.int32_data(int(i)));
  return out;
}

OnnxAttribute attribute_of(const onnx::AttributeProto& a, const std::string& path, const std::string& node,
                           ExternalData& external) {
  OnnxAttribute out;
  out.name = a.name();
  out.f = a.f();
  out.i = a.i();
  out.s = a.s();
  out.floats.assign(a.floats().begin(), a.floats().end());
  out.ints.assign(a.ints().begin(), a.ints().end());
  out.strings.assign(a.strings().begin(), a.strings().end());
  if (a.has_t()) out.tensor = std::make_shared<const OnnxTensor>(tensor_of(a.t(), path, node + "." + a.name(), external));
  using T = OnnxAttribute::Type;
  switch (a.type()) {
    case onnx::AttributeProto::FLOAT: out.type = T::Float; break;
    case onnx::AttributeProto::INT: out.type = T::Int; break;
    case onnx::AttributeProto::STRING: out.type = T::String; break;
    case onnx::AttributeProto::TENSOR: out.type = T::Tensor; break;
    case onnx::AttributeProto::FLOATS: out.type = T::Floats; break;
    case onnx::AttributeProto::INTS: out.type = T::Ints; break;
    case onnx::AttributeProto::STRINGS: out.type = T::Strings; break;
    case onnx::AttributeProto::UNDEFINED:  // files of IR version 1: the field that is set says
      out.type = a.has_f() ? T::Float : a.has_i() ? T::Int : a.has_s() ? T::String : a.has_t() ? T::Tensor
                 : a.floats_size() ? T::Floats : a.ints_size() ? T::Ints : a.strings_size() ? T::Strings : T::Other;
      break;
    default: out.type = T::Other; break;  // graphs, sparse tensors, type protos
  }
  return out;
}

// The dynamo exporter's name scopes, a Python list of strings ("['', 'features', 'features.1',
// 'conv2d']"), as a scoped name "/features/features.1/conv2d" (the last part the op's own).
std::string scope_of(const std::string& list) {
  std::string out, part;
  bool quoted = false;
  char quote = 0;
  for (char c : list) {
    if (quoted) {
      if (c == quote) {
        if (!part.empty()) out += "/" + part;
        part.clear(), quoted = false;
      } else {
        part += c;
      }
    } else if (c == '\'' || c == '"') {
      quoted = true, quote = c;
    }
  }
  return out;
}

// NodeProto's metadata_props (field 9, ONNX 1.16 and up), which the dynamo exporter fills and an
// older library keeps among the unknown fields: the name scopes' entry as a scoped name, or "".
std::string torch_scope(const onnx::NodeProto& n) {
  constexpr int kMetadataProps = 9;
  const google::protobuf::UnknownFieldSet& unknown = n.GetReflection()->GetUnknownFields(n);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& f = unknown.field(i);
    if (f.number() != kMetadataProps || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    onnx::StringStringEntryProto entry;
    if (entry.ParseFromString(f.length_delimited()) && entry.key() == "pkg.torch.onnx.name_scopes")
      return scope_of(entry.value());
  }
  return "";
}

OnnxValueInfo value_of(const onnx::ValueInfoProto& v) {
  OnnxValueInfo out;
  out.name = v.name();
  if (!v.type().has_tensor_type()) return out;
  const onnx::TypeProto_Tensor& t = v.type().tensor_type();
  out.elem_type = t.elem_type();
  out.has_shape = t.has_shape();
  for (const onnx::TensorShapeProto_Dimension& d : t.shape().dim())
    out.dims.push_back({d.has_dim_value() ? d.dim_value() : -1, d.dim_param()});
  return out;
}

}  // namespace

OnnxModel parse_onnx_model(std::span<const uint8_t> bytes, const std::string& path, ExternalData& external) {
  if (bytes.empty())
    fail("'{}' is empty (0 bytes), not an ONNX model: the export did not finish, or the copy was cut off; {}", path,
         kExportAgain);
  if (bytes.size() > size_t(INT_MAX))
    fail("'{}' is {:.2f} GiB, over protobuf's 2 GiB limit for one message: kiln reads ONNX models stored in one file "
         "under 2 GiB", path, double(bytes.size()) / double(1 << 30));
  onnx::ModelProto proto;
  if (!proto.ParseFromArray(bytes.data(), int(bytes.size())))
    fail("'{}' is not a readable ONNX model: protobuf cannot parse its {} bytes (the file is damaged or truncated, or "
         "is not ONNX); {}", path, bytes.size(), kExportAgain);
  if (!proto.has_graph() || proto.graph().node_size() == 0)
    fail("'{}' holds no ONNX graph{}: the file is truncated or damaged, or is not an ONNX model; {}", path,
         proto.has_graph() ? " nodes" : "", kExportAgain);
  const onnx::GraphProto& g = proto.graph();
  if (g.sparse_initializer_size() > 0)
    fail("'{}' stores {} initializers as sparse tensors ('{}' first), which kiln does not read; export dense weights",
         path, g.sparse_initializer_size(), g.sparse_initializer(0).values().name());
  OnnxModel m;
  m.path = path;
  m.ir_version = proto.ir_version();
  for (const onnx::OperatorSetIdProto& o : proto.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") m.opset = std::max(m.opset, o.version());
  m.producer_name = proto.producer_name();
  m.producer_version = proto.producer_version();
  m.graph_name = g.name();
  for (const onnx::StringStringEntryProto& p : proto.metadata_props()) m.metadata[p.key()] = p.value();
  for (const onnx::TensorProto& t : g.initializer()) {
    m.initializers.push_back(tensor_of(t, path, "", external));
    if (m.initializers.back().name.empty())
      fail("'{}': initializer {} has no name, so no node can read it: the file is damaged; {}", path,
           m.initializers.size() - 1, kExportAgain);
  }
  for (const onnx::ValueInfoProto& v : g.input()) m.inputs.push_back(value_of(v));
  for (const onnx::ValueInfoProto& v : g.output()) m.outputs.push_back(value_of(v));
  for (const onnx::NodeProto& n : g.node()) {
    OnnxNode node;
    node.name = n.name();
    node.op_type = n.op_type();
    node.domain = n.domain() == "ai.onnx" ? "" : n.domain();
    node.inputs.assign(n.input().begin(), n.input().end());
    node.outputs.assign(n.output().begin(), n.output().end());
    const std::string label = node_label(node);
    for (const onnx::AttributeProto& a : n.attribute()) node.attributes.push_back(attribute_of(a, path, label, external));
    if (node.name.find('/') == std::string::npos) node.scope = torch_scope(n);
    m.nodes.push_back(std::move(node));
  }
  return m;
}

}  // namespace kiln::onnx_import

namespace kiln {
bool onnx_import_available() { return true; }
}  // namespace kiln
