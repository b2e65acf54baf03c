#pragma once
// The ONNX model kiln exports, before it is serialized: nodes, float initializers (already in
// ONNX's layouts, NCHW / OIHW) and metadata. Built from a program by build_onnx_graph
// (onnx_graph_builder.cpp) without the ONNX library; only write_onnx_model (onnx_proto_writer.cpp)
// turns it into the library's protobuf, so the layout and folding logic compiles, and can be read,
// without libonnx.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/executable.h"
#include "kiln/export.h"

namespace kiln::onnx_export {

inline constexpr int kOpset = 17;

struct Attribute {
  enum class Kind { Int, Ints, Float };
  std::string name;
  Kind kind = Kind::Int;
  int64_t i = 0;
  std::vector<int64_t> ints;
  float f = 0;
  static Attribute integer(std::string name, int64_t v) { return {std::move(name), Kind::Int, v, {}, 0}; }
  static Attribute integers(std::string name, std::vector<int64_t> v) {
    return {std::move(name), Kind::Ints, 0, std::move(v), 0};
  }
  static Attribute real(std::string name, float v) { return {std::move(name), Kind::Float, 0, {}, v}; }
};

struct Node {
  std::string op_type, name;
  std::vector<std::string> inputs, outputs;
  std::vector<Attribute> attributes;
};

// A float32 constant tensor (a weight, or a scalar of a composed activation), row-major.
struct Initializer {
  std::string name;
  Shape shape;  // {} for a scalar
  std::vector<float> values;
};

struct Graph {
  std::string name;                 // the model's
  Shape input_chw;                  // "input" is [N, C, H, W], N symbolic
  int64_t classes = 0;              // "logits" is [N, classes]
  std::vector<Node> nodes;          // in topological order
  std::vector<Initializer> initializers;
  std::map<std::string, std::string> metadata;  // metadata_props
  std::string doc;                  // the graph's doc_string
};

inline constexpr const char* kInputName = "input";
inline constexpr const char* kOutputName = "logits";

// Appends nodes and constants to a Graph, naming what it creates uniquely.
class GraphWriter {
 public:
  explicit GraphWriter(Graph& graph) : graph_(graph) {}
  // Adds the node; returns `output` (a copy: the graph's nodes move as it grows).
  std::string node(const std::string& op_type, std::vector<std::string> inputs, const std::string& output,
                          std::vector<Attribute> attributes = {});
  // A float32 scalar constant (one initializer per value), for composed activations.
  std::string scalar(float value);
  void initializer(std::string name, Shape shape, std::vector<float> values);
  // The metadata_props entry `key` (made empty the first time).
  std::string& metadata(const std::string& key) { return graph_.metadata[key]; }

 private:
  Graph& graph_;
  std::map<float, std::string> scalars_;
};

// The eval-mode program of `exe` as ONNX nodes (onnx_graph_builder.cpp), each layer's written by
// its kind's export (export/layer_export.h): reads its parameters and running statistics. A layer
// kind without an export is a kiln::Error naming the layer.
Graph build_onnx_graph(Executable& exe, const OnnxExportOptions& options);

// Serializes the graph with the ONNX library's protobuf classes, runs onnx::checker::check_model and
// strict shape inference on it, and writes it to `path` atomically; returns the bytes written
// (onnx_proto_writer.cpp, or onnx_unavailable.cpp in a build without libonnx-dev).
int64_t write_onnx_model(const Graph& graph, const std::string& path);
// Returns in a build with the ONNX library; otherwise a kiln::Error about writing `path` that says
// what to install.
void require_onnx_library(const std::string& path);

}  // namespace kiln::onnx_export
