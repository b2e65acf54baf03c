#include "runtime/cuda/env_settings.h"

#include <cstdlib>

#include "ir/cuda_option_table.h"
#include "kiln/error.h"

namespace kiln::cuda {

CudaOptions with_env_overrides(CudaOptions o) {
  for (const CudaOptionField& f : cuda_option_fields()) {
    if (f.type == CudaOptionField::Type::File) {
      if (auto path = env_text(f.env)) o.*f.file_field = std::move(*path);
      continue;
    }
    set_cuda_option_number(o, f, env_int(f.env, f.lo, f.hi, cuda_option_number(o, f), f.help));
  }
  return o;
}

void check_cuda_options(const CudaOptions& o) {
  for (const CudaOptionField& f : cuda_option_fields()) {
    if (f.type != CudaOptionField::Type::Count) continue;
    const int v = cuda_option_number(o, f);
    if (v < f.lo || v > f.hi)
      fail("CompileOptions::cuda.{} = {} is not valid: it takes {}, from {} to {} ({}, {} in kiln's CLI)", f.member,
           v, f.help, f.lo, f.hi, f.env, f.flag);
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
