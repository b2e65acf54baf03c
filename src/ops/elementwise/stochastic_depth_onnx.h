#pragma once
// How kiln's ONNX files keep their stochastic depth layers (torchvision's StochasticDepth, "row"
// mode). ONNX has no such operator, and in eval mode the layer is the identity, so the exporter
// (stochastic_depth_export.cpp) writes an Identity node named after the layer, which any runtime
// runs as what the layer computes there, and lists it in one metadata_props entry:
//   "kiln.stochastic_depth": {"<Identity node's name>": {"p": <drop probability>, "mode": "row"}, ...}
// p is the float's value written as a double, so it reads back bit for bit. kiln::import_onnx
// (import/onnx_ops_stochastic_depth.cpp) maps each listed Identity back to a stochastic depth layer
// of that p under the node's name, which is the layer's, so the imported model draws the zoo
// model's masks and trains as it does. Without the entry an Identity stays the identity.
namespace kiln {

inline constexpr const char* kStochasticDepthMetadataKey = "kiln.stochastic_depth";
inline constexpr const char* kStochasticDepthRowMode = "row";

}  // namespace kiln
