#include "cli/model_file_metadata.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "cli/class_name_lists.h"
#include "kiln/error.h"

namespace kiln::cli {
namespace {

// How a user mends a metadata entry: onnx's Python API edits metadata_props in place.
constexpr const char* kEditHint =
    "correct or delete the entry (in Python: m = onnx.load(FILE); edit or remove the entry of "
    "m.metadata_props whose key it is; onnx.save(m, FILE))";

const std::string* entry(const ModelSource& source, const char* key) {
  const auto& metadata = source.imported->metadata;
  const auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

// The value shown in a message: long values (a thousand class names) cut.
std::string shown(const std::string& value) {
  return value.size() <= 80 ? value : value.substr(0, 77) + "...";
}

// The numbers of `value`, one per channel, or a kiln::Error naming the file, the key and the fix.
std::vector<float> channel_numbers(const ModelSource& source, const char* key, const std::string& value,
                                   int channels) {
  std::vector<float> numbers;
  size_t start = 0;
  while (true) {
    const size_t comma = value.find(',', start);
    const std::string token = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const char* begin = token.c_str();
    char* end = nullptr;
    errno = 0;
    const float x = std::strtof(begin, &end);
    while (end && *end == ' ') ++end;
    if (token.empty() || end == begin || *end != '\0' || errno == ERANGE)
      fail("--model '{}': its metadata '{}' is '{}', and '{}' is not a number: kiln export writes one number per "
           "input channel, comma-separated (e.g. {}='{}'). Give --normalize imagenet or dataset to normalize "
           "otherwise, which does not read it, or {}", source.name, key, shown(value), token, key,
           std::string(key) == kNormMeanKey ? "0.485,0.456,0.406" : "0.229,0.224,0.225", kEditHint);
    numbers.push_back(x);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (int(numbers.size()) != channels)
    fail("--model '{}': its metadata '{}' holds {} number{} ('{}'), but the model's input has {} channel{}: the "
         "normalization takes one per input channel. Give --normalize imagenet or dataset to normalize otherwise, "
         "which does not read it, or {}", source.name, key, numbers.size(), numbers.size() == 1 ? "" : "s",
         shown(value), channels, channels == 1 ? "" : "s", kEditHint);
  return numbers;
}

}  // namespace

bool has_file_normalization(const ModelSource& source) {
  return source.is_file() && (entry(source, kNormMeanKey) || entry(source, kNormStdKey));
}

std::optional<ChannelStats> file_normalization(const ModelSource& source, int channels) {
  if (!has_file_normalization(source)) return std::nullopt;
  const std::string* mean = entry(source, kNormMeanKey);
  const std::string* stdev = entry(source, kNormStdKey);
  if (!mean || !stdev)
    fail("--model '{}': its metadata holds '{}' but no '{}': a normalization needs both the mean and the standard "
         "deviation of each input channel. Give --normalize imagenet or dataset to normalize otherwise, which does "
         "not read it, or add the missing entry", source.name, mean ? kNormMeanKey : kNormStdKey,
         mean ? kNormStdKey : kNormMeanKey);
  ChannelStats stats{channel_numbers(source, kNormMeanKey, *mean, channels),
                     channel_numbers(source, kNormStdKey, *stdev, channels)};
  for (int c = 0; c < channels; ++c) {
    if (!std::isfinite(stats.mean[size_t(c)]))
      fail("--model '{}': its metadata '{}' is '{}', whose channel {} is {}: a mean must be a finite number. Give "
           "--normalize imagenet or dataset to normalize otherwise, which does not read it, or {}", source.name,
           kNormMeanKey, shown(*mean), c, stats.mean[size_t(c)], kEditHint);
    const float s = stats.std[size_t(c)];
    if (!std::isfinite(s) || s <= 0)
      fail("--model '{}': its metadata '{}' is '{}', whose channel {} is {}: a standard deviation must be a finite "
           "number > 0 (every input is divided by it). Give --normalize imagenet or dataset to normalize otherwise, "
           "which does not read it, or {}", source.name, kNormStdKey, shown(*stdev), c, s, kEditHint);
  }
  return stats;
}

std::optional<std::vector<std::string>> file_class_names(const ModelSource& source, int classes) {
  const std::string* value = source.is_file() ? entry(source, kClassNamesKey) : nullptr;
  if (!value) return std::nullopt;
  const std::optional<std::vector<std::string>> names = parse_class_names(*value);
  if (!names)
    fail("--model '{}': its metadata '{}' is '{}', not a JSON array of names (kiln export writes e.g. "
         "[\"cat\",\"dog\"], one name per output); {}", source.name, kClassNamesKey, shown(*value), kEditHint);
  if (int(names->size()) != classes)
    fail("--model '{}': its metadata '{}' names {} class{} ({}), but the model gives {} output{}: one name per "
         "output. {}", source.name, kClassNamesKey, names->size(), names->size() == 1 ? "" : "es",
         class_names_text(*names), classes, classes == 1 ? "" : "s", kEditHint);
  return names;
}

std::string floats_text(const std::vector<float>& values) {
  std::string text;
  for (float v : values) text += fmt::format("{}{:.4g}", text.empty() ? "" : ",", v);
  return text;
}

}  // namespace kiln::cli
