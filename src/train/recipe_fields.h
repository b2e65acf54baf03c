#pragma once
// What a resumed run must share with its checkpoint (Trainer::recipe), one row per setting: the
// key the checkpoint's metadata records it under ("recipe.<key>"), how its value is read from the
// run, when it applies (momentum only for the optimizers that have it, gamma only for the step
// schedule) and what sets it, kiln train's flag and the library's field, so a refused resume
// names the fix. The optimizers' rows are their families' settings (compile/optimizer_family.h),
// one row per key however many families share it; the schedule's, the seed's and label
// smoothing's are the setting rows a resumed run must match (train/train_settings.h,
// settings/compile_settings.h: SettingInfo::compared_on_resume). Trainer::recipe
// writes and check_recipe compares the rows' keys and values; they are the checkpoint's format:
// a row's key and the text of its value may never change, or older checkpoints stop resuming.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/program.h"
#include "kiln/trainer.h"

namespace kiln {

// Where the values come from: the compiled program (its CompileOptions and tensor shapes), the
// model's name and the trainer's options.
struct RecipeRun {
  const Program& program;
  const std::string& model;
  const TrainOptions& train;
};

struct RecipeField {
  const char* key;                                     // "momentum"
  std::function<std::string(const RecipeRun&)> value;  // as the metadata holds it: "0.9"
  // Empty: always applies; else whether it does for this run.
  std::function<bool(const RecipeRun&)> applies;
  // The row whose value decides whether this one applies ("optimizer" for momentum): while they
  // differ, this row being recorded on one side only is no difference of its own.
  const char* decided_by = nullptr;
  const char* flag = nullptr;  // kiln train's ("--momentum"); nullptr: it has none
  const char* field = "";      // the library's ("CompileOptions::optimizer.values[\"momentum\"]")
  bool is_switch = false;      // a "true"/"false" value, set by --<flag> and --no-<flag>
};

// The rows, in the order the recipe lists them.
const std::vector<RecipeField>& recipe_fields();

// The row of `key`, or nullptr (TrainOptions::data_recipe's keys have none).
const RecipeField* recipe_field(const std::string& key);

// TrainOptions::data_recipe's key for where the data was (kiln train records the --data folder,
// its format and --val there), so that `kiln eval` finds it without --data. It says where the
// samples came from, not how they were made, so it is recorded but never compared: a resumed run
// may read the same data from another folder, and checkpoints written before it was recorded
// resume as before.
inline constexpr const char* kDataSourceKey = "data_source";

// Whether a resumed run must have the same value for `key` as its checkpoint (every key but
// kDataSourceKey).
bool recipe_key_compared(const std::string& key);

// Every row that applies to `run`, as (key, value), in table order.
std::vector<std::pair<std::string, std::string>> recipe_values(const RecipeRun& run);

// How to run with `value` for `row` again, for a resume error: "--lr 0.05 (TrainOptions::
// schedule.lr)", "--no-hflip (TrainOptions::augment.hflip)", or "0.9 as CompileOptions::
// optimizer.values["beta1"]" where kiln train has no flag.
std::string recipe_fix(const RecipeField& row, const std::string& value);

}  // namespace kiln
