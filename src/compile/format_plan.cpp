// The text `kiln plan` prints: layers after the passes, every tensor, and the arena totals.
#include <fmt/format.h>

#include "ir/fused_layer_kinds.h"
#include "kiln/memory_plan.h"
#include "kiln/program.h"
#include "settings/compile_settings.h"

namespace kiln {
namespace {

std::string mib(size_t bytes) { return fmt::format("{:.2f} MiB", double(bytes) / (1024.0 * 1024.0)); }

const char* role_name(TensorRole role) {
  switch (role) {
    case TensorRole::Input: return "input";
    case TensorRole::Label: return "label";
    case TensorRole::Output: return "output";
    case TensorRole::Param: return "param";
    case TensorRole::Grad: return "grad";
    case TensorRole::OptState: return "optstate";
    case TensorRole::Buffer: return "buffer";
    case TensorRole::ComputeParam: return "param16";
    case TensorRole::ComputeGrad: return "grad16";
    case TensorRole::OutputGrad: return "outgrad";
    case TensorRole::Activation: return "activation";
  }
  return "?";
}

// The ops whose side-stream work (wgrad) runs on beside the next op (compile/op_streams.h), as
// the GPU runs them; none on the CPU.
std::string format_op_streams(const Program& p) {
  int outliving = 0;
  for (const auto* ops : {&p.forward, &p.backward, &p.update, &p.inference})
    for (const Op& op : *ops) outliving += op.side_work_outlives;
  if (outliving == 0) return "";
  return fmt::format("streams: {} ops leave their wgrad on the side stream running beside the next op\n",
                     outliving);
}

// 11689512 -> "11,689,512".
std::string thousands(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string format_plan(const Program& p, const MemoryPlan& plan) {
  std::string out;
  const auto& o = p.options;
  int seams = 0;
  for (const Layer& l : p.graph.layers) seams += l.marks.seam_out;
  // The header: the device, then every reported compile setting (settings/compile_settings.h) in
  // its plan words, a switch as on/off; the seams fusion across layers made are counted.
  out += fmt::format("program: {} layers, device {}", p.graph.layers.size() - 1, device_name(o.device));
  for (const Setting& row : compile_settings()) {
    if (!row.info.reported) continue;
    std::string value = row.text_of(o);
    if (row.type == SettingType::Switch) value = value == "true" ? "on" : "off";
    if (row.info.key == std::string("fuse_seams") && o.fuse_seams) value += fmt::format(" ({} seams)", seams);
    out += fmt::format(", {} {}", row.info.plan_words ? row.info.plan_words : row.info.key, value);
  }
  out += "\n";
  // torchvision's two numbers of a model (kiln::count_model), to set beside its tables.
  const ModelCounts counts = count_model(p);
  out += fmt::format("model: {} parameters, {:.3f} G multiply-adds per image\n", thousands(counts.parameters),
                     double(counts.multiply_adds) / 1e9);
  out += "\nlayers (after passes):\n";
  for (size_t i = 1; i < p.graph.layers.size(); ++i) {
    const Layer& l = p.graph.layers[i];
    std::string inputs;
    for (int in : l.inputs) inputs += (inputs.empty() ? "" : ", ") + p.graph.layers[in].name;
    std::string marks = l.marks.frozen ? "  [frozen: eval mode, not trained]"
                        : l.marks.first_layer ? "  [first layer: no dX]" : "";
    // Fusion across layers: who applies this layer's BatchNorm + ReLU, whose this layer applies.
    if (l.marks.seam_in) marks += "  [applies its input's BN+ReLU]";
    if (l.marks.seam_out) marks += "  [BN+ReLU applied by its consumers]";
    out += fmt::format("  {:4} {:<15} {:<34} {:<18} <- {}{}\n", i, l.kind == LayerKind::Activation ? activation_name(attrs_of<ActivationAttrs>(l).activation) : layer_kind_name(l.kind), l.name,
                       shape_str(l.out_shape), inputs, marks);
  }
  std::string fused;  // every kind the fusions add, by its family's name for it
  for (int i = 0; i < fused_layer::kCount; ++i)
    fused += fmt::format(", {} layers: {}", layer_kind_name(fused_layer::kind_at(i)),
                         p.graph.count(fused_layer::kind_at(i)));
  out += fmt::format("  CBR layers: {}{}\n", p.graph.count(LayerKind::CBR), fused);
  out += "\ntensors:\n";
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const TensorSpec& t = p.tensors[i];
    const bool view = t.alias_of >= 0;
    out += fmt::format("  {:<48} {:<10} {:<4} {:<20} {:>12} B  @{}{}\n", t.name, role_name(t.role),
                       dtype_name(t.dtype), shape_str(t.shape), t.bytes(), plan.offset[i],
                       view ? " (view of " + p.tensors[t.alias_of].name + ")" : "");
  }
  out += fmt::format("\nops: forward {}, backward {}, update {}, inference {}", p.forward.size(), p.backward.size(),
                     p.update.size(), p.inference.size());
  // Mixed precision: the cast that remakes the weights' compute copies after the host writes them.
  if (!p.refresh_copies.empty()) out += fmt::format(", copy refresh {}", p.refresh_copies.size());
  out += "\n";
  out += format_op_streams(p);
  out += "arena:\n";
  out += fmt::format("  parameters       {}\n", mib(plan.param_bytes));
  out += fmt::format("  gradients        {}\n", mib(plan.grad_bytes));
  out += fmt::format("  optimizer state  {}\n", mib(plan.opt_state_bytes));
  out += fmt::format("  buffers          {}\n", mib(plan.buffer_bytes));
  out += fmt::format("  inputs/outputs   {}\n", mib(plan.io_bytes));
  out += fmt::format("  activations      {} (shared by lifetime; {} if each had its own)\n",
                     mib(plan.activation_bytes), mib(plan.activation_sum_bytes));
  out += fmt::format("  total            {}\n", mib(plan.arena_bytes));
  return out;
}

}  // namespace kiln
