#include "train/recipe_fields.h"

#include <fmt/format.h>

namespace kiln {
namespace {

// Shortest text that reads back as the same float.
std::string number(float x) { return fmt::format("{}", x); }
std::string truth(bool b) { return b ? "true" : "false"; }

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::Constant: return "constant";
    case ScheduleKind::Cosine: return "cosine";
    case ScheduleKind::Step: return "step";
  }
  return "?";
}

const CompileOptions& compiled(const RecipeRun& r) { return r.program.options; }
const OptimizerConfig& optimizer(const RecipeRun& r) { return r.program.options.optimizer; }
// The data input, (N, H, W, C): what the program was compiled for, whatever set it.
const Shape& input_shape(const RecipeRun& r) { return r.program.tensors[r.program.input].shape; }

bool sgd(const RecipeRun& r) { return optimizer(r).kind == OptimizerKind::SGD; }
bool adamw(const RecipeRun& r) { return optimizer(r).kind == OptimizerKind::AdamW; }
bool lars(const RecipeRun& r) { return optimizer(r).kind == OptimizerKind::LARS; }
bool with_momentum(const RecipeRun& r) { return sgd(r) || lars(r); }
bool step_schedule(const RecipeRun& r) { return r.train.schedule.kind == ScheduleKind::Step; }
bool has_logits(const RecipeRun& r) { return r.program.logits >= 0; }
bool frozen(const RecipeRun& r) { return !compiled(r).freeze.empty(); }

}  // namespace

const char* optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::SGD: return "sgd";
    case OptimizerKind::AdamW: return "adamw";
    case OptimizerKind::LARS: return "lars";
  }
  return "?";
}

// The order and the texts are those of the checkpoints written before this table (format
// kiln-checkpoint-2): tests/train/checkpoint_guard_test.cpp holds one.
const std::vector<RecipeField>& recipe_fields() {
  using R = const RecipeRun&;
  static const std::vector<RecipeField> fields = {
      {"model", [](R r) { return r.model; }, nullptr, nullptr, "--model", "the Blueprint's name"},
      {"input",
       [](R r) {
         const Shape& in = input_shape(r);
         return fmt::format("{}x{}x{}", in[1], in[2], in[3]);
       },
       nullptr, nullptr, nullptr, "CompileOptions::input_hwc (kiln train: the data's image size)"},
      {"classes", [](R r) { return std::to_string(r.program.tensors[r.program.logits].shape[1]); }, has_logits,
       nullptr, "--classes", "the model's output classes"},
      {"batch", [](R r) { return std::to_string(input_shape(r)[0]); }, nullptr, nullptr, "--batch",
       "CompileOptions::batch"},
      {"precision", [](R r) -> std::string { return precision_name(compiled(r).precision); }, nullptr, nullptr,
       "--precision", "CompileOptions::precision"},
      {"optimizer", [](R r) -> std::string { return optimizer_name(optimizer(r).kind); }, nullptr, nullptr,
       "--optimizer", "CompileOptions::optimizer.kind"},
      {"momentum", [](R r) { return number(optimizer(r).momentum); }, with_momentum, "optimizer", "--momentum",
       "CompileOptions::optimizer.momentum"},
      {"nesterov", [](R r) { return truth(optimizer(r).nesterov); }, sgd, "optimizer", "--nesterov",
       "CompileOptions::optimizer.nesterov", true},
      {"beta1", [](R r) { return number(optimizer(r).beta1); }, adamw, "optimizer", nullptr,
       "CompileOptions::optimizer.beta1 (kiln train has no flag: it keeps the default)"},
      {"beta2", [](R r) { return number(optimizer(r).beta2); }, adamw, "optimizer", nullptr,
       "CompileOptions::optimizer.beta2 (kiln train has no flag: it keeps the default)"},
      {"eps", [](R r) { return number(optimizer(r).eps); }, adamw, "optimizer", nullptr,
       "CompileOptions::optimizer.eps (kiln train has no flag: it keeps the default)"},
      {"trust_coefficient", [](R r) { return number(optimizer(r).trust_coefficient); }, lars, "optimizer",
       "--lars-eta", "CompileOptions::optimizer.trust_coefficient"},
      {"lars_skip_1d", [](R r) { return truth(optimizer(r).lars_skip_1d); }, lars, "optimizer", "--lars-skip-1d",
       "CompileOptions::optimizer.lars_skip_1d", true},
      {"weight_decay", [](R r) { return number(optimizer(r).weight_decay); }, nullptr, nullptr, "--weight-decay",
       "CompileOptions::optimizer.weight_decay"},
      {"schedule", [](R r) -> std::string { return schedule_name(r.train.schedule.kind); }, nullptr, nullptr,
       "--schedule", "TrainOptions::schedule.kind"},
      {"lr", [](R r) { return number(r.train.schedule.lr); }, nullptr, nullptr, "--lr", "TrainOptions::schedule.lr"},
      {"warmup", [](R r) { return std::to_string(r.train.schedule.warmup_epochs); }, nullptr, nullptr, "--warmup",
       "TrainOptions::schedule.warmup_epochs"},
      {"step_epochs", [](R r) { return std::to_string(r.train.schedule.step_epochs); }, step_schedule, "schedule",
       "--step-epochs", "TrainOptions::schedule.step_epochs"},
      {"gamma", [](R r) { return number(r.train.schedule.gamma); }, step_schedule, "schedule", "--gamma",
       "TrainOptions::schedule.gamma"},
      {"label_smoothing", [](R r) { return number(compiled(r).label_smoothing); }, nullptr, nullptr,
       "--label-smoothing", "CompileOptions::label_smoothing"},
      {"seed", [](R r) { return std::to_string(r.train.seed); }, nullptr, nullptr, "--seed", "TrainOptions::seed"},
      {"crop_pad", [](R r) { return std::to_string(r.train.augment.pad_crop); }, nullptr, nullptr, "--crop-pad",
       "TrainOptions::augment.pad_crop"},
      {"hflip", [](R r) { return truth(r.train.augment.hflip); }, nullptr, nullptr, "--hflip",
       "TrainOptions::augment.hflip", true},
      // Recorded only when set, so that the checkpoints of runs without it match as before.
      {"freeze", [](R r) { return compiled(r).freeze; }, frozen, nullptr, "--freeze", "CompileOptions::freeze"},
  };
  return fields;
}

const RecipeField* recipe_field(const std::string& key) {
  for (const RecipeField& f : recipe_fields())
    if (key == f.key) return &f;
  return nullptr;
}

bool recipe_key_compared(const std::string& key) { return key != kDataSourceKey; }

std::vector<std::pair<std::string, std::string>> recipe_values(const RecipeRun& run) {
  std::vector<std::pair<std::string, std::string>> values;
  for (const RecipeField& f : recipe_fields())
    if (!f.applies || f.applies(run)) values.emplace_back(f.key, f.value(run));
  return values;
}

std::string recipe_fix(const RecipeField& row, const std::string& value) {
  if (!row.flag) return fmt::format("{} as {}", value, row.field);
  if (row.is_switch)  // --hflip / --no-hflip
    return fmt::format("{} ({})", value == "true" ? std::string(row.flag) : "--no-" + std::string(row.flag + 2),
                       row.field);
  return fmt::format("{} {} ({})", row.flag, value, row.field);
}

}  // namespace kiln
