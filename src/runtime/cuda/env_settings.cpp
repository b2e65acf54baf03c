#include "runtime/cuda/env_settings.h"

#include <cstdlib>

#include "kiln/error.h"
#include "settings/cuda_settings.h"

namespace kiln::cuda {

CudaOptions with_env_overrides(CudaOptions o) {
  for (const Setting& row : cuda_settings()) {
    if (row.type == SettingType::Text) {
      if (auto text = env_text(row.info.env)) row.write(&o, *text);
      continue;
    }
    const int v = env_int(row.info.env, int(row.range.lo), int(row.range.hi), setting_number(row, &o), row.info.help);
    set_setting_number(row, &o, v);
  }
  return o;
}

void check_cuda_options(const CudaOptions& o) {
  for (const Setting& row : cuda_settings()) {
    if (row.type != SettingType::Count) continue;
    const int v = setting_number(row, &o);
    if (!row.range.contains(v))
      fail("{} = {} is not valid: it takes {}, from {} to {} ({}, {} in kiln's CLI)", row.info.member, v,
           row.info.help, row.range.lo, row.range.hi, row.info.env, row.info.flag);
  }
}

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
