#include "train/recipe_fields.h"

#include <fmt/format.h>

#include <algorithm>

#include "compile/optimizer_family.h"
#include "compile/optimizer_settings.h"
#include "settings/compile_settings.h"
#include "train/train_settings.h"

namespace kiln {
namespace {

std::string truth(bool b) { return b ? "true" : "false"; }

const CompileOptions& compiled(const RecipeRun& r) { return r.program.options; }
const OptimizerConfig& optimizer(const RecipeRun& r) { return r.program.options.optimizer; }
// The data input, (N, H, W, C): what the program was compiled for, whatever set it.
const Shape& input_shape(const RecipeRun& r) { return r.program.tensors[r.program.input].shape; }

bool has_logits(const RecipeRun& r) { return r.program.logits >= 0; }

// The row of a setting whose value the run holds in the struct `owner` gives: its key, its text,
// where it applies (and the row deciding that), its flag and its field, all the setting row's.
RecipeField from_setting(const Setting& s, std::function<const void*(const RecipeRun&)> owner) {
  RecipeField f;
  f.key = s.info.key;
  f.value = [&s, owner](const RecipeRun& r) { return s.read(owner(r)); };
  if (s.applies) f.applies = [&s, owner](const RecipeRun& r) { return s.applies(owner(r)); };
  f.decided_by = s.decided_by;
  f.flag = s.info.flag;
  f.field = s.info.member;
  f.is_switch = s.type == SettingType::Switch && s.info.flag_pair;
  return f;
}

// The settings of `rows` a resumed run must match, read from the struct `owner` gives.
std::vector<RecipeField> compared_fields(const std::vector<Setting>& rows,
                                         std::function<const void*(const RecipeRun&)> owner) {
  std::vector<RecipeField> fields;
  for (const Setting& s : rows)
    if (s.info.compared_on_resume) fields.push_back(from_setting(s, owner));
  return fields;
}

// The optimizers' rows: "optimizer", then each key of the families' settings once, in the order
// the families (by name) first declare it. A key's value is the chosen family's, and it applies
// when that family has it; the flag and field are the same for every family that has the key.
std::vector<RecipeField> optimizer_fields() {
  using R = const RecipeRun&;
  std::vector<RecipeField> fields = {
      from_setting(optimizer_choice(), [](R r) -> const void* { return &optimizer(r); })};
  for (const OptimizerFamily* family : all_optimizer_families()) {
    for (const Setting& s : family->settings()) {
      const std::string key = s.info.key;
      if (std::any_of(fields.begin(), fields.end(), [&](const RecipeField& f) { return key == f.key; })) continue;
      auto row_of = [key](R r) { return find_setting(optimizer_family(optimizer(r).name).settings(), key); };
      fields.push_back({s.info.key, [row_of](R r) { return row_of(r)->read(&optimizer(r)); },
                        [row_of](R r) { return row_of(r) != nullptr; }, "optimizer", s.info.flag, s.info.member,
                        s.type == SettingType::Switch && s.info.flag_pair});
    }
  }
  return fields;
}

}  // namespace

// The keys and the texts are those of the checkpoints written before this table (format
// kiln-checkpoint-2): tests/train/checkpoint_guard_test.cpp holds one.
const std::vector<RecipeField>& recipe_fields() {
  using R = const RecipeRun&;
  static const std::vector<RecipeField> fields = [] {
    std::vector<RecipeField> rows = {
        {"model", [](R r) { return r.model; }, nullptr, nullptr, "--model", "the Blueprint's name"},
        {"input",
         [](R r) {
           const Shape& in = input_shape(r);
           return fmt::format("{}x{}x{}", in[1], in[2], in[3]);
         },
         nullptr, nullptr, nullptr, "CompileOptions::input_hwc (kiln train: the data's image size)"},
        {"classes", [](R r) { return std::to_string(r.program.tensors[r.program.logits].shape[1]); }, has_logits,
         nullptr, "--classes", "the model's output classes"},
    };
    // The compile settings (batch, precision, freeze when given, label smoothing), the optimizer's,
    // then the training's (the schedule's and the seed), each from its rows.
    for (RecipeField& f : compared_fields(compile_settings(), [](R r) -> const void* { return &compiled(r); }))
      rows.push_back(std::move(f));
    for (RecipeField& f : optimizer_fields()) rows.push_back(std::move(f));
    for (RecipeField& f : compared_fields(train_settings(), [](R r) -> const void* { return &r.train; }))
      rows.push_back(std::move(f));
    const std::vector<RecipeField> after_training = {
        {"crop_pad", [](R r) { return std::to_string(r.train.augment.pad_crop); }, nullptr, nullptr, "--crop-pad",
         "TrainOptions::augment.pad_crop"},
        {"hflip", [](R r) { return truth(r.train.augment.hflip); }, nullptr, nullptr, "--hflip",
         "TrainOptions::augment.hflip", true},
    };
    rows.insert(rows.end(), after_training.begin(), after_training.end());
    return rows;
  }();
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
