#include "cli/checkpoint_data_fit.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/data_source.h"
#include "kiln/error.h"
#include "train/recipe_fields.h"

namespace kiln::cli {
namespace {

std::string hwc(const SampleShape& s) { return fmt::format("{}x{}x{}", s.height, s.width, s.channels); }

// The checkpoint's class names (metadata 'class_names'), empty when it names none.
std::vector<std::string> class_names(const CheckpointModel& m) {
  auto it = m.metadata.find("class_names");
  if (it == m.metadata.end()) return {};
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
  std::vector<std::string> names;
  if (!j.is_array()) return names;
  for (const auto& n : j)
    if (n.is_string()) names.push_back(n.get<std::string>());
  return names.size() == j.size() ? names : std::vector<std::string>();
}

// What to do instead: the data the checkpoint was trained on, when it records it.
std::string fix(const CheckpointModel& m) {
  const std::optional<DataSource> trained_on = parse_data_source(m.recipe(kDataSourceKey), m.path);
  const std::string data = trained_on ? fmt::format(" (--data {}, or no --data)", trained_on->path) : "";
  return fmt::format("evaluate '{}' on data like it was trained on{}, or this data with a checkpoint trained on "
                     "such data", m.path, data);
}

}  // namespace

void check_data_fits_checkpoint(const CheckpointModel& m, const SampleSource& source, const std::string& data,
                                const std::string& split) {
  const SampleShape mine = source.shape();
  std::vector<std::string> differ;
  if (mine.height != m.input.height || mine.width != m.input.width)
    differ.push_back(fmt::format("image size {}x{} against {}x{}", mine.height, mine.width, m.input.height,
                                 m.input.width));
  if (mine.channels != m.input.channels)
    differ.push_back(fmt::format("{} channel{} against {}", mine.channels, mine.channels == 1 ? "" : "s",
                                 m.input.channels));
  if (source.num_classes() != m.classes)
    differ.push_back(fmt::format("other classes, {} against {}: labels would not match", source.num_classes(),
                                 m.classes));
  if (!differ.empty())
    fail("checkpoint '{}' was trained on {} images of {} classes; this data ('{}', {} split) is {} with {}: {}. "
         "Nothing was loaded; {}", m.path, hwc(m.input), m.classes, data, split, hwc(mine), source.num_classes(),
         fmt::join(differ, "; "), fix(m));
  const std::vector<std::string> theirs = class_names(m), ours = source.class_names();
  if (theirs.empty() || ours.empty() || theirs == ours) return;
  for (size_t c = 0; c < std::min(theirs.size(), ours.size()); ++c)
    if (theirs[c] != ours[c])
      fail("'{}' holds other classes than the checkpoint '{}' was trained on: its class {} is '{}', the "
           "checkpoint's '{}'; labels would not match. {}", data, m.path, c, ours[c], theirs[c], fix(m));
  fail("'{}' holds other classes than the checkpoint '{}' was trained on ({} names against {}); labels would not "
       "match. {}", data, m.path, ours.size(), theirs.size(), fix(m));
}

}  // namespace kiln::cli
