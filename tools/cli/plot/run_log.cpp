#include "cli/plot/run_log.h"

#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "kiln/error.h"

namespace kiln {
namespace {

constexpr const char* kFix = "plot a file that kiln train --json wrote";

// The number at `key`; nullopt when absent or null (`required` refuses both).
std::optional<double> number(const nlohmann::json& j, const char* key, bool required, const std::string& path,
                             int line) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) fail("'{}' line {} has no '{}'; {}", path, line, key, kFix);
    return std::nullopt;
  }
  if (!it->is_number()) fail("'{}' line {}: '{}' is {}, not a number; {}", path, line, key, it->dump(), kFix);
  return it->get<double>();
}

}  // namespace

RunLog read_run_log(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, kFix);
  const std::string text(bytes.begin(), bytes.end());
  RunLog log;
  size_t start = 0;
  for (int line = 1; start < text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string content = text.substr(start, end - start);
    start = end + 1;
    if (content.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(content, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      const std::string shown = content.size() > 60 ? content.substr(0, 60) + "..." : content;
      fail("'{}' line {} is not a JSON object: '{}'; {}", path, line, shown, kFix);
    }
    EpochLine e;
    e.line = line;
    const double epoch = *number(j, "epoch", true, path, line);
    if (epoch < 1 || epoch != double(int(epoch)))
      fail("'{}' line {}: epoch {} is not a whole number from 1; {}", path, line, epoch, kFix);
    e.epoch = int(epoch);
    e.train_loss = *number(j, "train_loss", true, path, line);
    e.train_accuracy = *number(j, "train_accuracy", true, path, line);
    e.test_accuracy = number(j, "test_accuracy", false, path, line);
    e.lr = number(j, "lr", false, path, line);
    if (log.epochs.empty() || e.epoch <= log.epochs.back().epoch) {
      log.epochs.clear();
      ++log.runs;
    }
    log.epochs.push_back(e);
  }
  if (log.epochs.empty()) fail("'{}' holds no epoch lines (it is empty); {}", path, kFix);
  return log;
}

}  // namespace kiln
