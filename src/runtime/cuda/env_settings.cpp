#include "runtime/cuda/env_settings.h"

#include <cstdlib>

#include "kiln/error.h"

namespace kiln::cuda {

std::optional<std::string> env_text(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

int env_int(const char* name, int lo, int hi, int fallback, const char* meaning) {
  const std::optional<std::string> text = env_text(name);
  if (!text) return fallback;
  // At most 9 digits: the value then fits an int before the range check.
  const bool digits = text->size() <= 9 && text->find_first_not_of("0123456789") == std::string::npos;
  const long value = digits ? std::strtol(text->c_str(), nullptr, 10) : -1;
  if (!digits || value < lo || value > hi)
    fail("{}='{}' is not valid: it takes {}, a whole number from {} to {}", name, *text, meaning, lo, hi);
  return static_cast<int>(value);
}

}  // namespace kiln::cuda
