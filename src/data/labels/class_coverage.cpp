#include "data/labels/class_coverage.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "kiln/error.h"

namespace kiln {
namespace {

// "label 12 (1 sample, the first at record 57)" for each label in `which`, at most 5.
std::string labels_with_records(const std::vector<int32_t>& labels, const std::vector<int>& which) {
  std::map<int, std::pair<int64_t, int64_t>> seen;  // label -> (count, first record)
  for (int64_t i = 0; i < int64_t(labels.size()); ++i)
    if (std::binary_search(which.begin(), which.end(), labels[i])) {
      auto [it, fresh] = seen.try_emplace(labels[i], 0, i);
      ++it->second.first;
    }
  std::vector<std::string> parts;
  for (const auto& [label, found] : seen) {
    if (parts.size() == 5) {
      parts.push_back(fmt::format("{} more", seen.size() - 5));
      break;
    }
    parts.push_back(fmt::format("{} ({} sample{}, the first at record {})", label, found.first,
                                found.first == 1 ? "" : "s", found.second));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

std::vector<int64_t> samples_per_class(const std::vector<int32_t>& labels, int classes) {
  std::vector<int64_t> n(size_t(std::max(classes, 0)), 0);
  for (int32_t l : labels)
    if (l >= 0 && l < classes) ++n[size_t(l)];
  return n;
}

std::vector<int> classes_without_samples(const std::vector<int32_t>& labels, int classes) {
  const std::vector<int64_t> n = samples_per_class(labels, classes);
  std::vector<int> empty;
  for (int c = 0; c < classes; ++c)
    if (n[size_t(c)] == 0) empty.push_back(c);
  return empty;
}

std::string class_ranges(const std::vector<int>& classes) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < classes.size();) {
    size_t j = i;
    while (j + 1 < classes.size() && classes[j + 1] == classes[j] + 1) ++j;
    parts.push_back(j == i ? fmt::format("{}", classes[i]) : fmt::format("{}-{}", classes[i], classes[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

void check_training_labels(const std::vector<int32_t>& labels, const std::string& file) {
  if (labels.empty()) return;
  const int classes = *std::max_element(labels.begin(), labels.end()) + 1;
  const std::vector<int64_t> n = samples_per_class(labels, classes);
  std::vector<int> empty, in_use;
  for (int c = 0; c < classes; ++c) (n[size_t(c)] > 0 ? in_use : empty).push_back(c);
  if (empty.size() <= in_use.size()) return;
  // The stray labels, the ones to show: those in use above the first class without a sample.
  int dense_end = 0;  // classes 0..dense_end-1 are all in use
  while (dense_end < classes && n[size_t(dense_end)] > 0) ++dense_end;
  std::vector<int> stray;
  for (int c : in_use)
    if (c >= dense_end) stray.push_back(c);
  fail("the training labels in '{}' run up to {}, which makes {} classes, but {} of them have no training sample "
       "(classes {}): a model with an output for each would never see most of them. Labels {} hold {} of the {} "
       "samples; the others are {}. A label file with stray values like these is usually damaged: fix or remove "
       "those records (labels must number the classes 0..N-1)",
       file, classes - 1, classes, empty.size(), class_ranges(empty),
       dense_end > 0 ? fmt::format("0-{}", dense_end - 1) : std::string("below the first gap"),
       [&] {
         int64_t s = 0;
         for (int c = 0; c < dense_end; ++c) s += n[size_t(c)];
         return s;
       }(),
       labels.size(), stray.empty() ? std::string("none") : labels_with_records(labels, stray));
}

void check_test_labels(const std::vector<int32_t>& labels, int classes, const std::string& file,
                       const std::string& training_file) {
  std::vector<int> beyond;
  for (int32_t l : labels)
    if (l >= classes) beyond.push_back(l);
  if (beyond.empty()) return;
  std::sort(beyond.begin(), beyond.end());
  beyond.erase(std::unique(beyond.begin(), beyond.end()), beyond.end());
  fail("the test labels in '{}' include classes the training labels ('{}', classes 0-{}) do not have: {}. A model "
       "trained on that data has no output for them, so they could only count as errors; fix or remove those "
       "records",
       file, training_file, classes - 1, labels_with_records(labels, beyond));
}

}  // namespace kiln
