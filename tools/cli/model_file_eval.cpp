#include "cli/model_file_eval.h"

#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <utility>

#include "cli/class_name_lists.h"
#include "cli/model_file_metadata.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/onnx_import.h"

namespace kiln::cli {
namespace {

int64_t input_channels(const ModelSource& source) { return (*source.blueprint.input_hwc())[2]; }

// The file's model compiled for `height` x `width` images, its weights written, eval mode ready.
FileEvaluation build(ModelSource source, int height, int width, const EvalRun& run) {
  CompileOptions c;
  c.batch = run.batch > 0 ? run.batch : kModelFileEvalBatch;
  const DeviceSpec spec = resolve_device(run.device);
  c.device = spec.device, c.device_index = spec.index;
  c.precision = parse_precision(run.precision.empty() ? "fp32" : run.precision);
  c.input_hwc = {height, width, input_channels(source)};
  TrainOptions t;
  t.workers = run.workers;
  FileEvaluation out;
  out.trainer = std::make_unique<Trainer>(source.blueprint, c, t);
  load_imported_weights(out.trainer->executable(), *source.imported, {});
  const Program& p = out.trainer->executable().program();
  out.classes = int(p.tensors[size_t(p.inference_logits)].shape[1]);
  out.source = std::move(source);
  return out;
}

void note(const ModelSource& source, const std::string& text) {
  fmt::print(stderr, "kiln: {}: {}\n", source.name, text);
}

// What the data's labels must agree with: the file's count of outputs, and its class names where
// both name them.
void check_classes(const FileEvaluation& f, const SampleSource& data, const std::string& path,
                   const std::string& split, std::vector<std::string>& names) {
  const ModelSource& s = f.source;
  if (data.num_classes() != f.classes)
    fail("--model '{}' gives {} classes; this data ('{}', {} split) has {}: labels would not match outputs. Nothing "
         "was evaluated; evaluate the file on data of its {} classes, or train it on this data first (kiln train "
         "--model {} --data {}, which makes a new last layer for {} classes)", s.name, f.classes, path, split,
         data.num_classes(), f.classes, s.name, path, data.num_classes());
  const std::optional<std::vector<std::string>> theirs = file_class_names(s, f.classes);
  const std::vector<std::string> ours = data.class_names();
  names = theirs ? *theirs : ours;
  if (!theirs || ours.empty()) return;
  const std::optional<size_t> c = first_differing_label(ours, *theirs);
  if (!c) return;
  const std::string order =
      same_names_reordered(ours, *theirs)
          ? " (the same names in another order: kiln labels class folders in the sorted order of their names)"
          : "";
  fail("'{}' names its classes otherwise than --model '{}' (its metadata class_names): the data's class {} is '{}', "
       "the file's '{}'{}; labels would not match outputs. Nothing was evaluated; evaluate on data of the file's "
       "classes ({})", path, s.name, *c, ours[*c], (*theirs)[*c], order, class_names_text(*theirs));
}

// How the data's inputs are normalized for the file (see the header), said on stderr.
ChannelStats normalization(const ModelSource& s, const std::string& normalize, const SampleSource& data) {
  const int channels = int(input_channels(s));
  if (normalize == "auto") {
    if (std::optional<ChannelStats> file = file_normalization(s, channels)) {
      note(s, fmt::format("normalizing with the file's mean {} and std {}, which its weights were trained with (its "
                          "metadata norm_mean, norm_std); --normalize dataset or imagenet normalizes otherwise",
                          floats_text(file->mean), floats_text(file->std)));
      return *file;
    }
  }
  const ChannelStats chosen = data.channel_stats();
  if (normalize != "auto" && has_file_normalization(s))
    note(s, fmt::format("--normalize {}: normalizing as it says (mean {}, std {}), not with the file's own (its "
                        "metadata norm_mean, norm_std), which its weights were trained with", normalize,
                        floats_text(chosen.mean), floats_text(chosen.std)));
  else if (normalize == "auto")
    note(s, fmt::format("the file does not record how its inputs were normalized (no norm_mean, norm_std metadata, "
                        "as in PyTorch's exports): normalizing as kiln train would this data (--normalize auto), "
                        "mean {} and std {}; give --normalize imagenet for weights trained with ImageNet's (such as "
                        "torchvision's), or dataset for this data's own statistics",
                        floats_text(chosen.mean), floats_text(chosen.std)));
  return chosen;
}

}  // namespace

void check_checkpoint_or_model_file(const std::string& command, const std::string& checkpoint,
                                    const std::string& model) {
  if (!checkpoint.empty() && !model.empty())
    fail("kiln {}: give --checkpoint or --model, not both: --checkpoint '{}' holds its own model and weights", command,
         checkpoint);
  if (checkpoint.empty() && model.empty())
    fail("kiln {}: give --checkpoint FILE (written by kiln train) or --model FILE.onnx (a model file with its "
         "weights)", command);
  if (!model.empty() && !names_onnx_file(model))
    fail("kiln {} --model '{}': a zoo model has no trained weights to {}; give --model FILE.onnx (a model file "
         "with its weights), or --checkpoint FILE of a kiln train run", command, model, command);
}

FileEvaluation file_evaluation(const std::string& model, const std::string& normalize, const SampleSource& data,
                               const std::string& path, const std::string& split, const EvalRun& run) {
  const SampleShape shape = data.shape();
  ModelSource s = resolve_model(model, -1, int(shape.height), int(shape.width));
  print_model_notes(s, stderr);
  if (input_channels(s) != shape.channels)
    fail("--model '{}' reads images of {} channel{}; this data ('{}', {} split) gives {}. Nothing was evaluated; "
         "give --channels {} where the data are image files (folders, packs), or evaluate on data of {}-channel images",
         s.name, input_channels(s), input_channels(s) == 1 ? "" : "s", path, split, shape.channels, input_channels(s),
         input_channels(s));
  const ChannelStats norm = normalization(s, normalize, data);
  FileEvaluation f = build(std::move(s), int(shape.height), int(shape.width), run);
  std::vector<std::string> names;
  check_classes(f, data, path, split, names);
  f.trainer->set_inference_inputs(norm, std::move(names));
  return f;
}

FileEvaluation file_prediction(const std::string& model, int height, int width, const EvalRun& run) {
  ModelSource s = resolve_model(model, -1, height, width);
  print_model_notes(s, stderr);
  const int channels = int(input_channels(s));
  std::optional<ChannelStats> norm = file_normalization(s, channels);
  if (norm) {
    note(s, fmt::format("normalizing with the file's mean {} and std {} (its metadata norm_mean, norm_std)",
                        floats_text(norm->mean), floats_text(norm->std)));
  } else if (channels == 3) {
    norm = imagenet_channel_stats();
    note(s, fmt::format("the file does not record how its inputs were normalized (no norm_mean, norm_std metadata, "
                        "as in PyTorch's exports): normalizing with ImageNet's mean {} and std {}, which torchvision's "
                        "weights take; for other weights, evaluate with kiln eval --model --normalize on data, or "
                        "train from the file (kiln train --model) and predict with the checkpoint",
                        floats_text(norm->mean), floats_text(norm->std)));
  } else {
    fail("--model '{}' reads {}-channel images and does not record how they were normalized (no norm_mean, norm_std "
         "metadata); kiln predict cannot guess it. Evaluate it on data with kiln eval --model {} --data DIR "
         "--normalize dataset, or train from it (kiln train --model {}) and predict with the checkpoint", s.name,
         channels, s.name, s.name);
  }
  const Shape hwc = *s.blueprint.input_hwc();
  FileEvaluation f = build(std::move(s), int(hwc[0]), int(hwc[1]), run);
  std::vector<std::string> names = file_class_names(f.source, f.classes).value_or(std::vector<std::string>());
  f.trainer->set_inference_inputs(*norm, std::move(names));
  return f;
}

}  // namespace kiln::cli
