#include "cli/data_recipe.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "cli/data_settings.h"
#include "cli/data_source.h"
#include "kiln/error.h"
#include "kiln/safetensors.h"
#include "train/recipe_fields.h"

namespace kiln::cli {
namespace {

// The data half, in the order the recipe lists it: the data rows a resumed run must match but
// those the training half records under the same key (crop_pad and hflip, TrainOptions::augment's
// there).
const std::vector<const Setting*>& data_recipe_rows() {
  static const std::vector<const Setting*> rows = [] {
    std::vector<const Setting*> r;
    for (const Setting& s : data_settings())
      if (s.info.compared_on_resume && !recipe_field(s.info.key)) r.push_back(&s);
    return r;
  }();
  return rows;
}

// `a` as the recipe reads it: the format the one read, not "auto".
DataArgs as_read(const DataArgs& a, const std::string& format) {
  DataArgs r = a;
  r.format = format;
  return r;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> data_recipe(const DataArgs& a, const std::string& format) {
  // Where the data was, for kiln eval without --data: every format, never compared on resume.
  std::pair<std::string, std::string> where{kDataSourceKey, data_source_text(a, format)};
  if (!reads_image_files(format)) return {where};
  const DataArgs run = as_read(a, format);
  std::vector<std::pair<std::string, std::string>> r;
  for (const Setting* row : data_recipe_rows())
    if (!row->applies || row->applies(&run)) r.emplace_back(row->info.key, row->read(&run));
  r.push_back(std::move(where));
  return r;
}

void check_data_recipe_resumes(const std::string& checkpoint, const DataArgs& a, const std::string& format) {
  std::error_code ec;
  if (!std::filesystem::exists(checkpoint, ec)) return;  // --resume starts fresh
  const std::map<std::string, std::string> theirs = load_safetensors(checkpoint).metadata;
  std::string list;
  for (const auto& [key, value] : data_recipe(a, format)) {
    auto it = theirs.find("recipe." + key);
    if (!recipe_key_compared(key) || it == theirs.end() || it->second == value) continue;
    list += fmt::format("\n  {}: {} in the checkpoint, {} in this run; resume with {}", key, it->second, value,
                        data_setting(key.c_str()).fix_for(it->second));
  }
  if (list.empty()) return;
  fail("cannot resume from checkpoint '{}': it was written with a different recipe, so this run would not continue "
       "it:{}\nResume with the checkpoint's settings (only the epoch count may change), or start a new run with "
       "another checkpoint path", checkpoint, list);
}

}  // namespace kiln::cli
