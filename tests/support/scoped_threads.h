#pragma once
// kiln's thread count (kiln/threads.h) set for one scope, and the previous count restored after.
#include "kiln/threads.h"

namespace kiln::testing {

class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : saved_(kiln::threads()) { kiln::set_threads(n); }
  ~ScopedThreads() { kiln::set_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

}  // namespace kiln::testing
