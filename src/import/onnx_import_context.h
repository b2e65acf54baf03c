#pragma once
// What the op handlers (import/onnx_op_table.h) map an ONNX graph through: the graph's nodes in
// order (patterns recognized), which values are data (computed from the input) and which constants,
// the kiln value each data value became, the Blueprint being built, the layers' names, the weights
// taken from the file, and the checks that wait for the Blueprint's shapes.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "import/onnx_constants.h"
#include "import/onnx_graph_order.h"
#include "import/onnx_layer_names.h"
#include "import/onnx_model.h"
#include "kiln/blueprint.h"
#include "kiln/safetensors.h"

namespace kiln::onnx_import {

// A feature map (N, C, H, W) in ONNX, kiln's (N, H, W, C); or flat rows (N, F) in both.
enum class Form { Map, Rows };

// What an ONNX data value is in the Blueprint.
struct MappedValue {
  Blueprint::Ref ref;
  Form form;
  int64_t channels = -1;  // a map's C or rows' F; -1 where the importer does not know it (rows after a Flatten)
  // ONNX's value is (N, C, 1, 1): a map of one position, or the flat (N, C) kiln's global_avgpool
  // gives where every reader only flattens ONNX's pooled map.
  bool one_by_one = false;
};

// Checks the Blueprint's shapes settle (import/onnx_import_checks.h), and what else waits for them, by
// layer name.
struct PendingChecks {
  struct Features {  // a linear layer's input width (its weight's), or a Reshape's output width
    std::string layer, node;
    int64_t width;
    bool input_side;  // the layer's input's width, else its output's
  };
  struct Flatten {  // a Flatten/Reshape of a map: PyTorch's C,H,W order is kiln's H,W,C only for a linear reader
    std::string layer, node;
  };
  // Transpose (0, 2, 3, 1) -> Flatten: kiln's own H,W,C flatten, whose linear readers' columns the
  // file holds in that order (import/onnx_flatten_columns.h reorders them once the shapes settle).
  struct ChannelsLastFlatten {
    std::string layer, node;
  };
  struct CeilPool {  // ONNX's ceil_mode keeps a window PyTorch's (kiln's) rule may drop
    std::string layer, node;
    int kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right;
  };
  std::vector<Features> features;
  std::vector<Flatten> flattens;
  std::vector<ChannelsLastFlatten> channels_last_flattens;
  std::vector<CeilPool> ceil_pools;
};

// A SplitToSequence's value (import/onnx_ops_split.cpp): its input and the sizes of its pieces, runs
// of channels in order; each SequenceAt reading it becomes its piece's slice.
struct ChannelSequence {
  MappedValue input;
  std::vector<int64_t> sizes;
};

class ImportContext {
 public:
  ImportContext(const OnnxModel& model, const GraphOrder& order, std::vector<OnnxNode> nodes, Blueprint& blueprint);
  // The constant folder reads this context's values through a pointer to it: it stays where it is made.
  ImportContext(const ImportContext&) = delete;
  ImportContext& operator=(const ImportContext&) = delete;

  const OnnxModel& model() const { return model_; }
  const std::vector<OnnxNode>& nodes() const { return nodes_; }
  const std::string& path() const { return model_.path; }

  // Values: data (computed from the graph's input) or constant (everything else).
  bool is_data(const std::string& value) const { return data_.count(value) > 0; }
  bool reads_data(const OnnxNode& node) const;
  // The node's input `k` as mapped; a kiln::Error naming the node when it is not data.
  const MappedValue& input(const OnnxNode& node, size_t k) const;
  bool mapped(const std::string& value) const { return values_.count(value) > 0; }
  const MappedValue& value(const std::string& name) const { return values_.at(name); }
  void set(const std::string& value, const MappedValue& v);
  // The readers of `value` (positions in nodes()), and whether it is a graph output.
  const std::vector<int>& readers(const std::string& value) const;
  bool is_output(const std::string& value) const;

  // Constants: folded values (import/onnx_constants.h), and the stored tensors (initializers,
  // Constant nodes) that weights come from.
  const Folded* constant(const std::string& value) { return folder_->value(value); }
  const OnnxTensor* stored(const std::string& value) const { return folder_->stored(value); }
  // Input k of `node` as a constant scalar, or nothing (absent, or not one).
  std::optional<double> scalar_input(const OnnxNode& node, size_t k);

  // A parameter: input `k` of `node`, which must be a stored floating-point tensor; `what` names it
  // in messages ("its weight"). A kiln::Error naming the node otherwise. check_weight lists the fault
  // instead.
  const OnnxTensor& weight(const OnnxNode& node, size_t k, const char* what) const;
  void check_weight(const OnnxNode& node, size_t k, const char* what, std::vector<std::string>& problems) const;
  // Records `tensor` (PyTorch's layout; named as its initializer) as kiln's `kiln_tensor`. An
  // initializer given to two layers is refused: kiln gives each layer its own parameters.
  void add_weight(const OnnxNode& node, const std::string& kiln_tensor, NamedTensor tensor);

  // The Blueprint: from() the node's input (bp.from(in.ref)), then append its layer under
  // layer_name(node); produce() records the new last node as the node's first output.
  Blueprint& from(const MappedValue& in) { return blueprint_.from(in.ref); }
  Blueprint& blueprint() { return blueprint_; }  // the joins, which read their own handles
  void produce(const OnnxNode& node, Form form, int64_t channels, bool one_by_one = false);
  // The name node `node`'s layer takes (import/onnx_layer_names.h), fixed on first use.
  const std::string& layer_name(const OnnxNode& node);
  // Names the layers with parameters first, after their initializers, so other layers' names
  // never take theirs.
  void reserve_name(const OnnxNode& node, const std::string& name);
  // A name for a node's second or later layer (a split's pieces): `wanted`, or wanted_2, ... if taken.
  std::string claim_name(const std::string& wanted) { return name_pool_.claim(wanted); }
  void set_sequence(const std::string& value, ChannelSequence s) { sequences_.insert_or_assign(value, std::move(s)); }
  const ChannelSequence* sequence(const std::string& value) const {
    const auto it = sequences_.find(value);
    return it == sequences_.end() ? nullptr : &it->second;
  }

  // A node whose work another node's layer does (a MatMul's bias Add): it maps to nothing.
  void absorb(const OnnxNode& node) { absorbed_.insert(&node); }
  bool absorbed(const OnnxNode& node) const { return absorbed_.count(&node) > 0; }

  // A convolution's bias that the BatchNorm reading its output `value` takes into its running mean
  // (BN(x + b) with mean m is BN(x) with mean m - b, in training too, where the batch mean
  // cancels b): the convolution drops it, so that it fuses with the BatchNorm as kiln's do.
  struct FoldedBias {
    const OnnxTensor* bias;
    std::string conv;  // the convolution's layer, for the note
  };
  void fold_bias(const std::string& value, FoldedBias bias) { folded_bias_.insert_or_assign(value, bias); }
  const FoldedBias* folded_bias(const std::string& value) const {
    const auto it = folded_bias_.find(value);
    return it == folded_bias_.end() ? nullptr : &it->second;
  }

  // The biases folded so (one note names them after the import).
  std::vector<std::string>& folded_biases() { return folded_biases_list_; }

  // OnnxImportOptions::num_classes, for the head's handler (0: the file's count).
  void set_head_classes(int classes) { head_classes_ = classes; }
  int head_classes() const { return head_classes_; }

  void note(std::string text) { notes_.push_back(std::move(text)); }
  PendingChecks& checks() { return checks_; }

  // Results.
  std::vector<NamedTensor>& weights() { return weights_; }
  std::map<std::string, std::string>& kiln_tensors() { return kiln_tensors_; }
  std::vector<std::string>& notes() { return notes_; }

 private:
  const OnnxModel& model_;
  std::vector<OnnxNode> nodes_;
  Blueprint& blueprint_;
  std::unique_ptr<ConstantFolder> folder_;
  std::set<std::string> data_;
  std::map<std::string, std::vector<int>> readers_;
  std::set<std::string> outputs_;
  std::map<std::string, MappedValue> values_;
  std::map<std::string, ChannelSequence> sequences_;
  std::map<const OnnxNode*, std::string> names_;
  LayerNames name_pool_;
  std::set<const OnnxNode*> absorbed_;
  std::vector<NamedTensor> weights_;
  std::map<std::string, std::string> kiln_tensors_;
  std::map<std::string, std::string> weight_reader_;  // initializer -> the node that took it
  std::map<std::string, FoldedBias> folded_bias_;
  std::vector<std::string> folded_biases_list_;
  std::vector<std::string> notes_;
  PendingChecks checks_;
  int head_classes_ = 0;
};

// The tensor's bytes as a NamedTensor of the same name and dtype (floating-point tensors only).
NamedTensor named_tensor(const OnnxTensor& t);
// A matrix `t` (rows x cols, any floating dtype) transposed, same name and dtype: a MatMul's (in,
// out) weight as nn.Linear's (out, in).
NamedTensor transposed(const OnnxTensor& t);

}  // namespace kiln::onnx_import
