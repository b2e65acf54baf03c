#pragma once
// Every user-facing failure in kiln is a kiln::Error whose message names the culprit
// (layer, tensor, file, option) and what would fix it.
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace kiln
