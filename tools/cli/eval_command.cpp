#include "cli/eval_command.h"

#include <fmt/format.h>

#include <map>

#include "kiln/checkpoint.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/trainer.h"
#include "kiln/zoo.h"

namespace kiln::cli {
namespace {

std::string recipe_value(const std::map<std::string, std::string>& meta, const std::string& path,
                         const std::string& key) {
  auto it = meta.find("recipe." + key);
  if (it == meta.end())
    fail("checkpoint '{}' does not record its '{}'; evaluate a checkpoint written by kiln train", path, key);
  return it->second;
}

int to_int(const std::string& text, const std::string& path, const std::string& key) {
  try {
    return std::stoi(text);
  } catch (const std::logic_error&) {
    fail("checkpoint '{}' has a malformed '{}': '{}'", path, key, text);
  }
}

// The checkpoint's data settings, where the user did not give them on the command line.
void adopt_recipe(const std::map<std::string, std::string>& meta, const CLI::App& cmd, DataArgs& d) {
  auto take = [&](const char* key, const char* flag, auto&& apply) {
    auto it = meta.find(std::string("recipe.") + key);
    if (it != meta.end() && cmd.count(flag) == 0) apply(it->second);
  };
  take("transform", "--transform", [&](const std::string& v) { d.transform = v; });
  take("image_size", "--image-size", [&](const std::string& v) { d.image_size = std::stoi(v); });
  take("eval_resize", "--eval-resize", [&](const std::string& v) { d.eval_resize = std::stoi(v); });
  take("channels", "--channels", [&](const std::string& v) { d.channels = std::stoi(v); });
  take("exif_orientation", "--exif-orientation", [&](const std::string& v) { d.exif_orientation = v == "true"; });
}

}  // namespace

CLI::App* add_eval_command(CLI::App& app, EvalArgs& a) {
  CLI::App* cmd = app.add_subcommand("eval", "evaluate a checkpoint on a dataset's evaluation split (top-1 accuracy)");
  cmd->add_option("--checkpoint,-c", a.checkpoint, "checkpoint written by kiln train")->required()->type_name("FILE");
  add_data_options(cmd, a.data, false);
  cmd->add_option("--split", a.split, "val (the evaluation split) or train (the training files, evaluation transform)")
      ->check(CLI::IsMember({"val", "train"}));
  cmd->add_option("--batch,-b", a.batch, "batch size; 0: the checkpoint's")->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--device", a.device, "auto, cpu, cuda or cuda:N");
  cmd->add_option("--precision", a.precision, "fp32, fp16 or bf16; default: the checkpoint's");
  return cmd;
}

int run_eval(EvalArgs a, const CLI::App& cmd) {
  const SafetensorsFile file = load_safetensors(a.checkpoint);
  const auto& meta = file.metadata;
  adopt_recipe(meta, cmd, a.data);
  const std::string model = recipe_value(meta, a.checkpoint, "model");
  const int classes = to_int(recipe_value(meta, a.checkpoint, "classes"), a.checkpoint, "classes");
  const DataSplits data = open_dataset(a.data.data, data_options(a.data));
  const SampleSource& source = a.split == "val" ? *data.test : *data.train;
  if (source.count() == 0)
    fail("'{}' holds no {} split to evaluate on; give one with --val DIR or use --split train", a.data.data, a.split);
  CompileOptions c;
  c.batch = a.batch > 0 ? a.batch : to_int(recipe_value(meta, a.checkpoint, "batch"), a.checkpoint, "batch");
  const DeviceSpec spec = resolve_device(a.device);
  c.device = spec.device, c.device_index = spec.index;
  c.precision = parse_precision(a.precision.empty() ? recipe_value(meta, a.checkpoint, "precision") : a.precision);
  const SampleShape shape = source.shape();
  c.input_hwc = {shape.height, shape.width, shape.channels};
  TrainOptions t;
  t.workers = loader_workers(a.data, data.format);
  Trainer trainer(zoo::by_name(model, classes), c, t);
  trainer.load_weights(a.checkpoint);
  const std::vector<std::string> names = source.class_names();
  if (!trainer.class_names().empty() && !names.empty() && names != trainer.class_names())
    fail("'{}' holds other classes than the checkpoint '{}' was trained on ({} against {}); labels would not match",
         a.data.data, a.checkpoint, names.size(), trainer.class_names().size());
  const Trainer::Accuracy accuracy = trainer.evaluate_accuracy(source);
  fmt::print("kiln eval: {} ({}) on {} ({} split, {} images, {}x{}x{})\n", a.checkpoint, model, a.data.data, a.split,
             source.count(), shape.height, shape.width, shape.channels);
  std::vector<std::string> bad = source.skipped();
  if (!bad.empty()) fmt::print("skipped {} unreadable samples (--skip-bad), the first: {}\n", bad.size(), bad.front());
  fmt::print("test top-5 accuracy: {:.4f}\n", accuracy.top5);
  fmt::print("test accuracy: {:.4f}\n", accuracy.top1);
  return 0;
}

}  // namespace kiln::cli
