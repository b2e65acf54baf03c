#pragma once
// An environment variable set (or unset) for one scope, and what was there before restored after.
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace kiln::testing {

class ScopedEnv {
 public:
  // `value` nullptr: unset while this lives.
  ScopedEnv(std::string name, const char* value) : name_(std::move(name)) {
    if (const char* v = std::getenv(name_.c_str())) saved_ = v;
    if (value) setenv(name_.c_str(), value, 1);
    else unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (saved_) setenv(name_.c_str(), saved_->c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

}  // namespace kiln::testing
