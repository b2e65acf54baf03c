#include "cli/data_recipe.h"

#include <fmt/format.h>

#include <filesystem>
#include <functional>
#include <map>

#include "cli/data_settings.h"
#include "cli/data_source.h"
#include "kiln/error.h"
#include "kiln/safetensors.h"
#include "train/recipe_fields.h"

namespace kiln::cli {
namespace {

// One key of the data half: whether it applies to the run, its value and how to ask for a value
// again, read from the run's DataArgs (its format the one read).
struct DataRecipeRow {
  std::string key;
  std::function<bool(const DataArgs&)> applies;  // nullptr: always
  std::function<std::string(const DataArgs&)> value;
  std::function<std::string(const std::string& value)> fix;  // "--image-size 224 (DataOptions::transform.size)"
};

DataRecipeRow from_setting(const Setting& s) {
  DataRecipeRow r{s.info.key, nullptr, [&s](const DataArgs& a) { return s.read(&a); },
                  [&s](const std::string& v) { return s.fix_for(v); }};
  if (s.applies) r.applies = [&s](const DataArgs& a) { return s.applies(&a); };
  return r;
}

bool imagenet(const DataArgs& a) { return a.transform != "plain"; }

// A float as the shortest text that reads back as the same double.
std::string number(double x) { return fmt::format("{}", x); }
std::string range(const std::vector<double>& v) { return number(v[0]) + "," + number(v[1]); }

// The data half, in the order the recipe lists it: the format, then the rows a resumed run must
// match but those the training half records under the same key (crop_pad, which is
// TrainOptions::augment.pad_crop there), then the flags that are no rows.
const std::vector<DataRecipeRow>& data_recipe_rows() {
  static const std::vector<DataRecipeRow> rows = [] {
    // --format's row is not marked compared_on_resume (README's settings table says so), yet the
    // recipe has always recorded the format read, and resumes compare it.
    std::vector<DataRecipeRow> r = {from_setting(data_setting("data_format"))};
    for (const Setting& s : data_settings())
      if (s.info.compared_on_resume && !recipe_field(s.info.key)) r.push_back(from_setting(s));
    auto flag = [](const char* flag, const char* field) {
      return [flag, field](const std::string& v) { return fmt::format("{} {} ({})", flag, v, field); };
    };
    r.push_back({"channels", nullptr, [](const DataArgs& a) { return std::to_string(a.channels); },
                 flag("--channels", "DataArgs::channels")});
    r.push_back({"crop_scale", imagenet, [](const DataArgs& a) { return range(a.crop_scale); },
                 flag("--crop-scale", "DataArgs::crop_scale")});
    r.push_back({"crop_ratio", imagenet, [](const DataArgs& a) { return range(a.crop_ratio); },
                 flag("--crop-ratio", "DataArgs::crop_ratio")});
    r.push_back({"exif_orientation", nullptr,
                 [](const DataArgs& a) -> std::string { return a.exif_orientation ? "true" : "false"; },
                 [](const std::string& v) {
                   return fmt::format("{} (DataArgs::exif_orientation)",
                                      v == "true" ? "--exif-orientation" : "no --exif-orientation");
                 }});
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
  data_options(a);  // refuses what the library would (a one-number --crop-scale) before a range is read
  const DataArgs run = as_read(a, format);
  std::vector<std::pair<std::string, std::string>> r;
  for (const DataRecipeRow& row : data_recipe_rows())
    if (!row.applies || row.applies(run)) r.emplace_back(row.key, row.value(run));
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
    for (const DataRecipeRow& row : data_recipe_rows())
      if (row.key == key)
        list += fmt::format("\n  {}: {} in the checkpoint, {} in this run; resume with {}", key, it->second, value,
                            row.fix(it->second));
  }
  if (list.empty()) return;
  fail("cannot resume from checkpoint '{}': it was written with a different recipe, so this run would not continue "
       "it:{}\nResume with the checkpoint's settings (only the epoch count may change), or start a new run with "
       "another checkpoint path", checkpoint, list);
}

}  // namespace kiln::cli
