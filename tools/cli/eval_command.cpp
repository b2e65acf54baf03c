#include "cli/eval_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/checkpoint_data_fit.h"
#include "cli/checkpoint_model.h"
#include "cli/data_source.h"
#include "cli/eval_settings.h"
#include "cli/model_file_eval.h"
#include "cli/named_setting_options.h"
#include "kiln/error.h"
#include "kiln/trainer.h"
#include "train/recipe_fields.h"

namespace kiln::cli {
namespace {

struct Report {
  const EvalArgs& args;
  std::string model;  // the zoo model's or the imported file's name
  const SampleSource& source;
  const Trainer& trainer;
  const Trainer::Evaluation& result;
};

// A class's accuracy; null when the split holds none of it (0 would read as all wrong).
nlohmann::ordered_json class_accuracy(int64_t correct, int64_t count) {
  return count > 0 ? nlohmann::ordered_json(double(correct) / double(count)) : nlohmann::ordered_json(nullptr);
}

void print_json(const Report& r) {
  nlohmann::ordered_json per_class = nlohmann::ordered_json::object();
  for (size_t c = 0; c < r.result.class_count.size(); ++c)
    per_class[class_name(r.trainer, int(c))] = {{"correct", r.result.class_correct[c]},
                                                {"count", r.result.class_count[c]},
                                                {"accuracy", class_accuracy(r.result.class_correct[c],
                                                                            r.result.class_count[c])}};
  const SampleShape shape = r.source.shape();
  const auto given = [](const std::string& path) {
    return path.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(path);
  };
  const nlohmann::ordered_json out = {
      {"checkpoint", given(r.args.checkpoint)}, {"model_file", given(r.args.model)},
      {"model", r.model},                {"data", r.args.data.data},
      {"split", r.args.split},           {"images", r.result.images}, {"input", {shape.height, shape.width, shape.channels}},
      {"loss", r.result.loss},           {"top1", r.result.top1},     {"top5", r.result.top5},
      {"per_class", per_class},          {"skipped", r.source.skipped()}};
  fmt::print("{}\n", out.dump());
}

void print_text(const Report& r) {
  const SampleShape shape = r.source.shape();
  fmt::print("kiln eval: {} ({}) on {} ({} split, {} images, {}x{}x{})\n",
             r.args.checkpoint.empty() ? r.args.model : r.args.checkpoint, r.model,
             r.args.data.data, r.args.split, r.result.images, shape.height, shape.width, shape.channels);
  const std::vector<std::string> bad = r.source.skipped();
  if (!bad.empty()) fmt::print("skipped {} unreadable samples (--skip-bad), the first: {}\n", bad.size(), bad.front());
  size_t width = 5;  // "class"
  for (size_t c = 0; c < r.result.class_count.size(); ++c) width = std::max(width, class_name(r.trainer, int(c)).size());
  fmt::print("{:<{}}  {:>9}  {:>8}\n", "class", width, "correct", "accuracy");
  for (size_t c = 0; c < r.result.class_count.size(); ++c) {
    const int64_t right = r.result.class_correct[c], count = r.result.class_count[c];
    fmt::print("{:<{}}  {:>9}  {:>8}\n", class_name(r.trainer, int(c)), width, fmt::format("{}/{}", right, count),
               count > 0 ? fmt::format("{:.4f}", double(right) / double(count)) : std::string("-"));
  }
  fmt::print("test loss: {:.6f} (mean cross-entropy, eval mode)\n", r.result.loss);
  fmt::print("test top-5 accuracy: {:.4f}\n", r.result.top5);
  fmt::print("test accuracy: {:.4f}\n", r.result.top1);
}

// No --data: the data the checkpoint was trained on (its format and --val too, unless given), said
// on stderr (stdout may be --json's one object).
void take_data_trained_on(const CheckpointModel& m, const CLI::App& cmd, DataArgs& d) {
  const std::optional<DataSource> trained_on = parse_data_source(m.recipe(kDataSourceKey), m.path);
  if (!trained_on)
    fail("no --data given, and checkpoint '{}' does not record the data it was trained on (it was written before "
         "kiln recorded it); give the data to evaluate on with --data", m.path);
  std::error_code ec;
  if (!std::filesystem::exists(trained_on->path, ec))
    fail("no --data given, and '{}', the data checkpoint '{}' was trained on, is not there any more; give the data "
         "to evaluate on with --data", trained_on->path, m.path);
  d.data = trained_on->path;
  if (cmd.count("--format") == 0) d.format = trained_on->format;
  if (cmd.count("--val") == 0) d.val = trained_on->val;
  fmt::print(stderr, "kiln: no --data given: evaluating on {}, the data {} was trained on\n", d.data, m.path);
}

}  // namespace

CLI::App* add_eval_command(CLI::App& app, EvalArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "eval", "evaluate a checkpoint (or a model file's weights, --model) on a dataset's evaluation split (top-1, "
              "top-5, loss, per-class accuracy)");
  // Its own flags (cli/eval_settings.h): --checkpoint or --model, --split, --batch, --device,
  // --precision, --json; the data's in their groups.
  add_named_setting_options(cmd, eval_settings(), a, {{"checkpoint", "FILE"}, {"model", "FILE.onnx"}});
  add_data_options(cmd, a.data, false);
  // Not data/digits (add_data_options' default): without --data, the data the checkpoint was trained on.
  cmd->get_option("--data")->default_str("the data the checkpoint was trained on (--model: required)");
  return cmd;
}

int run_eval(EvalArgs a, const CLI::App& cmd) {
  check_checkpoint_or_model_file("eval", a.checkpoint, a.model);
  std::optional<CheckpointModel> checkpoint;
  if (a.model.empty()) {
    checkpoint = read_checkpoint_model(a.checkpoint);
    if (cmd.count("--data") == 0) take_data_trained_on(*checkpoint, cmd, a.data);
    adopt_data_recipe(*checkpoint, &cmd, a.data);
  } else if (cmd.count("--data") == 0) {
    fail("kiln eval --model '{}': give the data to evaluate on with --data (a model file records none)", a.model);
  }
  DataOptions options = data_options(a.data);
  // Only the split evaluated is checked file by file: a bad training file does not stop an eval of val.
  options.check_train_files = a.split == "train";
  options.check_val_files = a.split == "val";
  const DataSplits data = open_dataset(a.data.data, options);
  const SampleSource& source = a.split == "val" ? *data.test : *data.train;
  if (source.count() == 0)
    fail("'{}' holds no {} split to evaluate on; give one with --val DIR or use --split train", a.data.data, a.split);
  EvalRun run;
  run.device = a.device, run.precision = a.precision, run.batch = a.batch;
  run.workers = loader_workers(a.data, data.format);
  std::unique_ptr<Trainer> trainer;
  std::string model;
  if (checkpoint) {
    check_data_fits_checkpoint(*checkpoint, source, a.data.data, a.split);
    trainer = evaluation_trainer(*checkpoint, source.shape(), run);
    model = checkpoint->model;
  } else {
    FileEvaluation file = file_evaluation(a.model, a.data.normalize, source, a.data.data, a.split, run);
    trainer = std::move(file.trainer);
    model = file.source.blueprint.name();
  }
  const Trainer::Evaluation result = trainer->evaluate_in_detail(source);
  const Report report{a, model, source, *trainer, result};
  if (a.json) print_json(report);
  else print_text(report);
  return 0;
}

}  // namespace kiln::cli
