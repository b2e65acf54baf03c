#include "cli/checkpoint_data_fit.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <vector>

#include "cli/class_name_lists.h"
#include "cli/data_source.h"
#include "kiln/error.h"
#include "train/recipe_fields.h"

namespace kiln::cli {
namespace {

std::string hwc(const SampleShape& s) { return fmt::format("{}x{}x{}", s.height, s.width, s.channels); }

// The checkpoint's class names (metadata 'class_names'), empty when it names none (or not as a list of
// names: the checkpoint's own reader refuses those when the weights load).
std::vector<std::string> class_names(const CheckpointModel& m) {
  auto it = m.metadata.find("class_names");
  if (it == m.metadata.end()) return {};
  return parse_class_names(it->second).value_or(std::vector<std::string>());
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
  if (theirs.empty() || ours.empty()) return;
  const std::optional<size_t> c = first_differing_label(ours, theirs);
  if (!c) return;
  if (*c < std::min(theirs.size(), ours.size()))
    fail("'{}' holds other classes than the checkpoint '{}' was trained on: its class {} is '{}', the "
         "checkpoint's '{}'; labels would not match. {}", data, m.path, *c, ours[*c], theirs[*c], fix(m));
  fail("'{}' holds other classes than the checkpoint '{}' was trained on ({} names against {}); labels would not "
       "match. {}", data, m.path, ours.size(), theirs.size(), fix(m));
}

}  // namespace kiln::cli
