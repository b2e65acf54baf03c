// export_onnx: the path checked, the program's graph built (onnx_graph_builder.cpp) and written
// through the ONNX library (onnx_proto_writer.cpp).
#include "export/onnx_graph.h"
#include "export/output_path.h"
#include "kiln/export.h"

namespace kiln {

OnnxExportSummary export_onnx(Executable& exe, const std::string& path, const OnnxExportOptions& options) {
  onnx_export::require_onnx_library(path);
  export_layout::check_output_path(path, options.overwrite, "ONNX model", "--overwrite (OnnxExportOptions::overwrite)");
  const onnx_export::Graph graph = onnx_export::build_onnx_graph(exe, options);
  OnnxExportSummary summary;
  summary.opset = onnx_export::kOpset;
  summary.nodes = int64_t(graph.nodes.size());
  for (const onnx_export::Node& n : graph.nodes) ++summary.op_counts[n.op_type];
  summary.bytes = onnx_export::write_onnx_model(graph, path);
  return summary;
}

}  // namespace kiln
