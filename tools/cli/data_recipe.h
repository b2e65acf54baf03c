#pragma once
// The checkpoint recipe's data half (TrainOptions::data_recipe): the settings of how image files
// became samples that a resumed run must share, made from the data rows a resumed run must match
// (cli/data_settings.h: SettingInfo::compared_on_resume), and its check on --resume, which names
// the flag that gives the checkpoint's value back. The keys and the texts of the values are the
// checkpoint's format: they may never change, or older checkpoints stop resuming.
#include <string>
#include <utility>
#include <vector>

#include "cli/data_options.h"

namespace kiln::cli {

// The data settings a checkpoint must share to be resumed (Trainer's recipe), none for the
// in-memory formats, whose settings the recipe already holds; and for every format where the data
// was (kDataSourceKey, cli/data_source.h: recorded for kiln eval, never compared). `a` as
// resolved_data_args made it, `format` the format open_dataset read.
std::vector<std::pair<std::string, std::string>> data_recipe(const DataArgs& a, const std::string& format);

// Before the Trainer resumes `checkpoint` (if it exists): a kiln::Error listing every data setting
// both record with another value, each with the flag that gives the checkpoint's value back
// ("--image-size 224 (DataOptions::transform.size)"). A key recorded on one side only, and every
// other setting, is left to Trainer::check_recipe, which compares the whole recipe.
void check_data_recipe_resumes(const std::string& checkpoint, const DataArgs& a, const std::string& format);

}  // namespace kiln::cli
