// Fusion across layers (CompileOptions::fuse_seams): where a CBR's output feeds only convolutions
// that normalize their own output (CBR, conv_bn), its BatchNorm + ReLU is applied inside each
// consumer (the consumer's prologue) instead of in a pass of its own, so the normalized output is
// never written and read back.
#include "ir/fused_layer_kinds.h"
#include "kiln/compile.h"

#include <vector>

namespace kiln {

// A seam joins a CBR layer (the producer) to consumers that are all convolutions that normalize
// their output (CBR, or a ResNet block end's conv_bn) reading it as their one input, none of them
// frozen (a frozen layer runs its inference ops, which read the normalized output). The producer
// then writes only its convolution's output, its statistics and the per-channel scale and shift
// of its BatchNorm; each consumer applies relu(x * scale + shift) to that output as it reads it,
// and the producer's backward recomputes its ReLU mask from the same three tensors. The network's
// last layer has no consumers and keeps its output.
void mark_seams(LayerGraph& graph) {
  const auto consumers = graph.consumers();
  for (size_t p = 1; p < graph.layers.size(); ++p) {
    Layer& producer = graph.layers[p];
    if (producer.kind != LayerKind::CBR || producer.marks.frozen || consumers[p].empty()) continue;
    bool all_convolve = true;
    for (int c : consumers[p]) {
      const Layer& consumer = graph.layers[c];
      const bool convolves = consumer.kind == LayerKind::CBR || consumer.kind == fused_layer::ConvBN;
      all_convolve &= convolves && !consumer.marks.frozen && consumer.inputs.size() == 1;
    }
    if (!all_convolve) continue;
    producer.marks.seam_out = true;
    for (int c : consumers[p]) graph.layers[c].marks.seam_in = true;
  }
}

}  // namespace kiln
