#include "kiln/torch_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <string_view>

#include "formats/safetensors/tensor_f32.h"
#include "formats/torch/torch_layouts.h"
#include "formats/torch/weights_file_kind.h"
#include "ir/fused_layer_kinds.h"
#include "kiln/checkpoint.h"
#include "kiln/error.h"
#include "train/non_finite_text.h"
#include "train/torch_weights_in_memory.h"

namespace kiln {
namespace {

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// "a.b.c" -> {"a.b", "c"}; "c" -> {"", "c"}.
std::pair<std::string, std::string> split_last(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return {"", name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

std::string join(const std::string& parent, const std::string& child) {
  return parent.empty() ? child : parent + "." + child;
}

// A Blueprint::cbr composite's convolution and BN names ("X.conv", "X.bn"), by the composite's name:
// the fused CBR layer, the conv_bn_act layer "X" of a window the CBR does not run, or with fusion
// off (CompileOptions::fuse_cbr) the ReLU layer "X" after the Conv "X.conv" and BatchNorm "X.bn" it
// stands for (src/compile/expand.cpp keeps those names).
struct Composite {
  std::string conv, bn;
};
std::map<std::string, Composite> cbr_composites(const LayerGraph& graph) {
  std::map<std::string, LayerKind> kinds;
  for (const Layer& l : graph.layers) kinds[l.name] = l.kind;
  auto is = [&](const std::string& name, LayerKind kind) {
    auto it = kinds.find(name);
    return it != kinds.end() && it->second == kind;
  };
  std::map<std::string, Composite> found;
  for (const Layer& l : graph.layers) {
    const std::string conv = l.name + ".conv", bn = l.name + ".bn";
    const bool fused = l.kind == LayerKind::CBR || l.kind == fused_layer::ConvBnAct;
    if ((fused && l.conv_name == conv && l.bn_name == bn) ||
        (l.kind == LayerKind::ReLU && is(conv, LayerKind::Conv) && is(bn, LayerKind::BatchNorm)))
      found[l.name] = {conv, bn};
  }
  return found;
}

// kiln module name -> PyTorch module name, for the modules whose names differ (Blueprint::cbr
// composites); every other module keeps its name.
std::map<std::string, std::string> module_names(const LayerGraph& graph) {
  std::map<std::string, std::string> renamed;
  const std::map<std::string, Composite> composites = cbr_composites(graph);
  auto composite = [&](const Layer& l) -> const Composite* {
    auto it = composites.find(l.name);
    return it == composites.end() ? nullptr : &it->second;
  };
  // Sequences holding cbr composites under numbered names ("features.3"): PyTorch numbers each of
  // the composite's conv, BN and ReLU modules, and every other layer as one.
  std::map<std::string, int> next_index;  // sequence -> its next PyTorch index
  std::set<std::string> numbered;         // sequences with a composite among their numbered layers
  for (const Layer& l : graph.layers) {
    const auto [parent, last] = split_last(l.name);
    if (composite(l) && all_digits(last)) numbered.insert(parent);
  }
  for (const Layer& l : graph.layers) {
    const auto [parent, last] = split_last(l.name);
    const Composite* cbr = composite(l);
    if (cbr && last.size() > 4 && last.rfind("conv", 0) == 0 && all_digits(last.substr(4))) {
      // ResNet: conv1 -> conv1 + bn1, layer1.0.conv2 -> layer1.0.conv2 + layer1.0.bn2.
      renamed[cbr->conv] = l.name;
      renamed[cbr->bn] = join(parent, fmt::format("bn{}", last.substr(4)));
      continue;
    }
    if (!all_digits(last) || !numbered.count(parent)) continue;
    int& index = next_index[parent];
    if (cbr) {
      renamed[cbr->conv] = join(parent, std::to_string(index));
      renamed[cbr->bn] = join(parent, std::to_string(index + 1));
      index += 3;  // conv, BN, ReLU
    } else {
      renamed[l.name] = join(parent, std::to_string(index));
      index += 1;
    }
  }
  return renamed;
}

// PyTorch's BatchNorm counter: it sets the averaging factor only when momentum is None (a
// cumulative average). kiln's BN momentum is fixed, so the count has no use here.
bool is_bn_counter(const std::string& name) { return split_last(name).second == "num_batches_tracked"; }

// What a floating-point tensor of the file holds that float32 cannot: "" when every value fits.
// non_finite_text has refused NaNs and infinities already, so an infinity here is an F64 value
// past float32's range.
std::string out_of_f32_range(const NamedTensor& saved, const std::vector<float>& values) {
  const auto inf = std::find_if(values.begin(), values.end(), [](float v) { return std::isinf(v); });
  if (inf == values.end()) return "";
  return fmt::format("'{}' is {} and holds a value past float32's range (at index {}); kiln computes in float32",
                     saved.name, dtype_name(saved.dtype), inf - values.begin());
}

bool is_loaded(const TensorSpec& t) {
  if (t.role == TensorRole::Param) return true;
  const std::string last = split_last(t.name).second;
  return t.role == TensorRole::Buffer && (last == "running_mean" || last == "running_var");
}

// A kiln checkpoint's tensors that are a run's state rather than its weights: the optimizer's
// ("optimizer.momentum_buffer", ...) and any other buffer. A new run starts its own, so they are
// passed over, not listed as unused. Weights end in these names (kiln's layers name them so; a
// layer scale's is ConvNeXt's `layer_scale`).
bool is_run_state(const std::string& name) {
  const size_t dot = name.rfind('.');
  const std::string_view last = std::string_view(name).substr(dot == std::string::npos ? 0 : dot + 1);
  return last != "weight" && last != "bias" && last != "running_mean" && last != "running_var" &&
         last != "layer_scale";
}

// The names the file's tensors have: PyTorch's for a state_dict, kiln's own for a kiln checkpoint.
std::map<std::string, std::string> file_names(const Program& program, bool kiln_file) {
  std::map<std::string, std::string> names = torch_names(program);
  if (kiln_file)
    for (auto& [kiln_name, file_name] : names) file_name = kiln_name;
  return names;
}

// After the list of what does not fit: why, in the terms of what the file is.
std::string misfit_hint(const Program& p, const SafetensorsFile& file, bool kiln_file, bool names_differ) {
  if (!kiln_file)
    return "Is it the state_dict of the same architecture? Names follow PyTorch's modules (kiln::torch_names)";
  const std::string model = kiln_checkpoint_model(file);
  if (names_differ)
    return fmt::format("Its layers are not this model's: it is a checkpoint of {}; fine-tune it with --model {} "
                       "(--new-head for another number of classes), or start from a checkpoint of this model",
                       model.empty() ? "another model" : model, model.empty() ? "<its model>" : model);
  const Shape& in = p.tensors[p.input].shape;
  return fmt::format("The layers are this model's, but shaped for other data: this run's images are {}x{}x{}; "
                     "another number of classes takes --new-head, another image size or channel count a checkpoint "
                     "trained on such images", in[1], in[2], in[3]);
}

}  // namespace

std::map<std::string, std::string> torch_names(const Program& program) {
  const std::map<std::string, std::string> modules = module_names(program.graph);
  std::map<std::string, std::string> names;
  for (const auto* ids : {&program.params, &program.buffers}) {
    for (int id : *ids) {
      const TensorSpec& t = program.tensors[id];
      if (!is_loaded(t)) continue;
      const auto [module, field] = split_last(t.name);
      const auto it = modules.find(module);
      names[t.name] = it == modules.end() ? t.name : join(it->second, field);
    }
  }
  return names;
}

TorchWeightsLoaded load_torch_weights(Executable& exe, const std::string& path, const TorchWeightsOptions& options) {
  // safetensors.torch.save_file(model.state_dict()) keeps BN's int64 num_batches_tracked: read
  // past it (and any other dtype kiln has no use for, refused below unless it is such a counter).
  SafetensorsReadOptions read;
  read.skip_unsupported_dtypes = true;
  return load_torch_weights(exe, load_safetensors(path, read), path, options);
}

TorchWeightsLoaded load_torch_weights(Executable& exe, const SafetensorsFile& file, const std::string& path,
                                      const TorchWeightsOptions& options) {
  const Program& p = exe.program();
  // A checkpoint of kiln train holds kiln's names and layouts: its weights load as they are.
  const bool kiln_file = is_kiln_checkpoint(file);
  const std::map<std::string, std::string> names = file_names(p, kiln_file);
  const std::map<std::string, Shape> flattened =
      kiln_file ? std::map<std::string, Shape>() : torch_layout::flattened_maps(p.graph);
  // The head: the last linear layer's weight and bias.
  std::set<std::string> head;
  for (const Layer& l : p.graph.layers)
    if (l.kind == LayerKind::Linear) head = {l.name + ".weight", l.name + ".bias"};

  // A convolution with a bias that BN follows (torchvision's VGG convolutions have one; kiln's fused
  // conv + BN has none): BN's batch statistics cancel the bias in training, and in evaluation
  // BN(x + b) with running mean m is BN(x) with running mean m - b, so the bias folds into the mean.
  std::map<std::string, std::string> folded_bias;  // kiln running_mean name -> the file's bias name
  for (const Layer& l : p.graph.layers) {
    if (kiln_file) break;  // kiln's convolutions before BN have no bias
    // The bias sits beside the convolution's weight in PyTorch's module.
    const auto weight = names.find(l.conv_name + ".weight");
    if (l.bn_name.empty() || weight == names.end() || names.count(l.conv_name + ".bias")) continue;
    const std::string bias = split_last(weight->second).first + ".bias";
    if (file.find(bias)) folded_bias[l.bn_name + ".running_mean"] = bias;
  }

  std::vector<std::string> problems;
  std::vector<std::pair<int, std::vector<float>>> writes;
  std::set<std::string> used;
  size_t missing = 0;  // the model's tensors the file lacks
  for (const auto& [kiln_name, torch_name] : names) {
    const int id = exe.id(kiln_name);
    const TensorSpec& t = p.tensors[id];
    const bool new_head = options.new_head && head.count(kiln_name);
    const NamedTensor* saved = file.find(torch_name);
    const SkippedTensor* skipped = file.find_skipped(torch_name);
    if (saved || skipped) used.insert(torch_name);
    if (new_head) continue;
    // An integer (or quantized) tensor where kiln needs weights.
    auto not_floating = [&](const std::string& dtype, const Shape& shape) {
      problems.push_back(fmt::format("'{}' is {} {}, not floating point: kiln loads F32, F16, BF16 or F64 weights "
                                     "(kiln's '{}'); save the float model's state_dict",
                                     torch_name, dtype, shape_str(shape), kiln_name));
    };
    if (skipped) {
      not_floating(skipped->dtype, skipped->shape);
      continue;
    }
    if (!saved) {
      ++missing;
      problems.push_back(kiln_file ? fmt::format("missing: '{}' ({})", kiln_name, shape_str(t.shape))
                                   : fmt::format("missing: '{}' (kiln's '{}', {})", torch_name, kiln_name,
                                                 shape_str(t.shape)));
      continue;
    }
    if (!is_floating_point(saved->dtype)) {
      not_floating(dtype_name(saved->dtype), saved->shape);
      continue;
    }
    // The shape PyTorch gives this tensor: a convolution's OIHW for kiln's KRSC, else kiln's.
    const bool conv = t.shape.size() == 4 && !kiln_file;
    const Shape torch_shape = conv ? Shape{t.shape[0], t.shape[3], t.shape[1], t.shape[2]} : t.shape;
    if (saved->shape != torch_shape) {
      const std::string head_hint =
          head.count(kiln_name) ? " (another number of classes: fine-tune with a new head, --new-head)" : "";
      if (kiln_file)
        problems.push_back(fmt::format("'{}' is {} in the file but {} in this model{}", kiln_name,
                                       shape_str(saved->shape), shape_str(torch_shape), head_hint));
      else
        problems.push_back(fmt::format("'{}' is {} but kiln's '{}' needs {} here{}", torch_name,
                                       shape_str(saved->shape), kiln_name, shape_str(torch_shape), head_hint));
      continue;
    }
    if (const std::string bad = non_finite_text(*saved); !bad.empty()) {
      problems.push_back(bad);
      continue;
    }
    // fp16 and bf16 widen exactly; float64 rounds to float32, which kiln's weights are.
    std::vector<float> src = f32_values(*saved), dst;
    if (const std::string bad = out_of_f32_range(*saved, src); !bad.empty()) {
      problems.push_back(bad);
      continue;
    }
    if (conv) {
      dst = torch_layout::oihw_to_krsc(src, t.shape);
    } else if (const auto map = flattened.find(kiln_name); map != flattened.end()) {
      dst = torch_layout::chw_columns_to_hwc(src, t.shape[0], map->second);  // PyTorch's flatten of NCHW
    } else {
      dst = std::move(src);
    }
    if (const auto fold = folded_bias.find(kiln_name); fold != folded_bias.end()) {
      const NamedTensor& bias = *file.find(fold->second);
      used.insert(fold->second);
      if (!is_floating_point(bias.dtype) || bias.shape != t.shape) {
        problems.push_back(fmt::format("'{}' is {} {} but the convolution has {} channels", fold->second,
                                       dtype_name(bias.dtype), shape_str(bias.shape), t.shape[0]));
        continue;
      }
      const std::vector<float> b = f32_values(bias);
      std::string bad = non_finite_text(bias);
      if (bad.empty()) bad = out_of_f32_range(bias, b);
      if (!bad.empty()) {
        problems.push_back(bad);
        continue;
      }
      for (size_t i = 0; i < dst.size(); ++i) dst[i] -= b[i];
    }
    writes.emplace_back(id, std::move(dst));
  }
  TorchWeightsLoaded loaded;
  if (kiln_file) loaded.kiln_checkpoint = kiln_checkpoint_text(file);
  std::vector<std::string> unused;
  for (const NamedTensor& t : file.tensors) {
    if (used.count(t.name) || (kiln_file && is_run_state(t.name))) continue;
    if (is_bn_counter(t.name)) {
      loaded.bn_counters.push_back(t.name);
      continue;
    }
    unused.push_back(fmt::format("not used: '{}' {} (this model has no tensor of that name)", t.name, shape_str(t.shape)));
  }
  for (const SkippedTensor& t : file.skipped) {
    if (used.count(t.name) || (kiln_file && is_run_state(t.name))) continue;
    if (is_bn_counter(t.name)) {  // int64 in every PyTorch state_dict
      loaded.bn_counters.push_back(t.name);
      continue;
    }
    unused.push_back(fmt::format("not used: '{}' {} {}, a dtype kiln does not load (this model has no tensor of "
                                 "that name)", t.name, t.dtype, shape_str(t.shape)));
  }
  if (!problems.empty() || !unused.empty()) {
    // Both kinds, a dozen of each at most: a wrong architecture shows as many of both.
    std::string list;
    for (const std::vector<std::string>* kind : {&problems, &unused}) {
      for (size_t i = 0; i < kind->size() && i < 12; ++i) list += "\n  " + (*kind)[i];
      if (kind->size() > 12) list += fmt::format("\n  ... and {} more like it", kind->size() - 12);
    }
    // A file of other layers shows tensors the model has no place for.
    fail("'{}' ({}) does not fit this model ({} problems; nothing was loaded):{}\n{}", path,
         kiln_file ? kiln_checkpoint_text(file) : state_dict_text(file), problems.size() + unused.size(), list,
         misfit_hint(p, file, kiln_file, missing > 0 || !unused.empty()));
  }
  for (const auto& [id, values] : writes) {
    if (p.tensors[id].dtype == DType::F64) {  // float64 programs (the gradient checks)
      const std::vector<double> wide(values.begin(), values.end());
      exe.write(id, wide.data(), wide.size() * sizeof(double));
    } else {
      exe.write(id, values.data(), values.size() * sizeof(float));
    }
  }
  for (const std::string& name : head)
    if (options.new_head && (file.find(names.at(name)) || file.find_skipped(names.at(name))))
      loaded.left_out.push_back(names.at(name));
  loaded.tensors = static_cast<int>(writes.size());
  return loaded;
}

}  // namespace kiln
