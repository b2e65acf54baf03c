#pragma once
// A process id that no process has: a child's, once reaped (for stale-file tests).
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace kiln::testing {

inline pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

}  // namespace kiln::testing
