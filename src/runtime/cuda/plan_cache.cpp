#include "runtime/cuda/plan_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>

#include "core/file_io.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

constexpr const char* kFormat = "kiln-plan-cache";
constexpr int kVersion = 2;  // 1 held engine ids and frontend knob types

using nlohmann::json;

json to_json(const CachedPlan& p) {
  return {{"name", p.name}, {"ms", p.ms}, {"workspace", p.workspace}, {"exhaustive", p.exhaustive}};
}

CachedPlan from_json(const json& j) {
  CachedPlan p;
  p.name = j.at("name").get<std::string>();
  p.ms = j.at("ms").get<double>();
  p.workspace = j.at("workspace").get<size_t>();
  p.exhaustive = j.value("exhaustive", false);  // absent in files of kiln 0.1.0's first releases
  if (p.name.empty()) throw std::runtime_error("empty plan name");
  return p;
}

// The entries of the file at `path` (none when it does not exist).
std::map<std::string, CachedPlan> read_plans(const std::string& path) {
  std::map<std::string, CachedPlan> plans;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return plans;
  const std::vector<uint8_t> bytes = read_file_bytes(path, "the plan cache (--plan-cache / KILN_PLAN_CACHE)");
  try {
    const json doc = json::parse(bytes.begin(), bytes.end());
    if (doc.at("format").get<std::string>() != kFormat)
      fail("plan cache '{}': not a kiln plan cache (format '{}'); delete it or choose another file (--plan-cache, KILN_PLAN_CACHE)",
           path, doc.at("format").get<std::string>());
    if (doc.at("version").get<int>() != kVersion)
      fail("plan cache '{}' has version {}, this kiln reads version {}; delete it to tune again", path,
           doc.at("version").get<int>(), kVersion);
    for (const auto& [key, entry] : doc.at("plans").items()) plans[key] = from_json(entry);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("plan cache '{}' is not readable ({}); delete it or choose another file (--plan-cache, KILN_PLAN_CACHE)", path, e.what());
  }
  return plans;
}

// Holds an exclusive flock(2) on "<cache>.lock" for its lifetime, so that two processes that tune
// at once (the cache is shared by default) do not both read the file, merge and rename, each over
// the other's new entries. Without the lock (a folder that is not writable, a file system without
// flock) the write goes ahead unlocked: the rename still never leaves a half-written file, at
// worst one process's newest entries are tuned again by a later run.
class WriterLock {
 public:
  explicit WriterLock(const std::string& cache) {
    fd_ = ::open((cache + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~WriterLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::string default_plan_cache_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/kiln/cudnn-plans.json";
  const char* home = std::getenv("HOME");
  if (home && home[0] != '\0') return std::string(home) + "/.cache/kiln/cudnn-plans.json";
  return "";
}

PlanCache::PlanCache(std::string path) : path_(std::move(path)) {
  if (path_.empty()) fail("plan cache: the file name is empty; set KILN_PLAN_CACHE to a file path");
  plans_ = read_plans(path_);
}

std::optional<CachedPlan> PlanCache::find(const std::string& key) const {
  auto it = plans_.find(key);
  if (it == plans_.end()) return std::nullopt;
  return it->second;
}

void PlanCache::store(const std::string& key, const CachedPlan& plan) {
  plans_[key] = plan;
  write();
}

void PlanCache::forget(const std::string& key) {
  if (plans_.erase(key)) write(&key);
}

void PlanCache::write(const std::string* dropped) {
  const std::filesystem::path target(path_);
  if (target.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(target.parent_path(), ec);  // a failure surfaces below
  }
  const WriterLock lock(path_);
  // Another process may have tuned other graphs since this one read the file: keep theirs too.
  std::map<std::string, CachedPlan> merged;
  try {
    merged = read_plans(path_);
  } catch (const Error&) {
    merged.clear();  // an unreadable file is replaced by this process's entries
  }
  for (const auto& [key, plan] : plans_) merged[key] = plan;
  if (dropped) merged.erase(*dropped);
  plans_ = merged;

  json doc = {{"format", kFormat}, {"version", kVersion}, {"plans", json::object()}};
  for (const auto& [key, plan] : plans_) doc["plans"][key] = to_json(plan);
  const std::string text = doc.dump(1) + "\n";
  write_file_atomic(path_, {std::as_bytes(std::span<const char>(text.data(), text.size()))});
}

}  // namespace kiln::cuda
