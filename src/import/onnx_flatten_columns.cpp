#include "import/onnx_flatten_columns.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <string_view>

#include "formats/torch/torch_layouts.h"
#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln::onnx_import {
namespace {

// `matrix` (rows x H*W*C, in the file's dtype) with its columns moved from H,W,C order to C,H,W
// (torch_layout::hwc_columns_to_chw, for elements of any size: the loader widens them later).
void hwc_columns_to_chw(NamedTensor& matrix, const Shape& hwc) {
  const int64_t H = hwc.at(0), W = hwc.at(1), C = hwc.at(2), in = H * W * C;
  if (matrix.shape.size() != 2 || matrix.shape[1] != in)
    fail("internal: the linear weight '{}' {} does not read a {}x{}x{} map", matrix.name, shape_str(matrix.shape), H, W,
         C);
  const size_t size = dtype_size(matrix.dtype);
  std::vector<std::byte> chw(matrix.data.size());
  for (int64_t o = 0; o < matrix.shape[0]; ++o)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t c = 0; c < C; ++c)
          std::memcpy(chw.data() + size_t(o * in + (c * H + h) * W + w) * size,
                      matrix.data.data() + size_t(o * in + (h * W + w) * C + c) * size, size);
  matrix.data = std::move(chw);
}

}  // namespace

void reorder_channels_last_columns(const LayerGraph& graph, ImportContext& ctx) {
  std::map<std::string, std::string> channels_last;  // flatten layer -> its ONNX nodes, for the note
  for (const PendingChecks::ChannelsLastFlatten& f : ctx.checks().channels_last_flattens)
    channels_last[f.layer] = f.node;
  if (channels_last.empty()) return;
  std::map<std::string, int> index;
  for (size_t i = 0; i < graph.layers.size(); ++i) index[graph.layers[i].name] = int(i);
  // The weights the loader will reorder from C,H,W to H,W,C: exactly these, by kiln tensor name.
  for (const auto& [kiln_weight, hwc] : torch_layout::flattened_maps(graph)) {
    const std::string linear = kiln_weight.substr(0, kiln_weight.size() - std::string_view(".weight").size());
    const int flatten = torch_layout::flatten_read_by(graph, index.at(linear));
    const auto node = channels_last.find(graph.layers.at(size_t(flatten)).name);
    if (node == channels_last.end()) continue;  // ONNX's own C,H,W flatten: the file's columns are PyTorch's
    for (NamedTensor& w : ctx.weights()) {
      const auto kiln = ctx.kiln_tensors().find(w.name);
      if (kiln == ctx.kiln_tensors().end() || kiln->second != kiln_weight) continue;
      hwc_columns_to_chw(w, hwc);
      ctx.note(fmt::format(
          "the linear layer '{}' reads the {} after a Transpose (0, 2, 3, 1): kiln's own channels-last flatten, in "
          "H,W,C order over a {}x{} map of {} channels (as kiln exports a flatten that dropout or an activation reads); "
          "its weight '{}' is taken with its columns reordered from that order to nn.Linear's C,H,W after "
          "torch.flatten(x, 1), the layout of the imported weights",
          linear, node->second, hwc[0], hwc[1], hwc[2], w.name));
    }
  }
}

}  // namespace kiln::onnx_import
