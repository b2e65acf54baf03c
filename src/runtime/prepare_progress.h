#pragma once
// The line a person sees while a program is prepared. Preparing a GPU program builds and times
// cuDNN plans (seconds to minutes on a cold plan cache) before the first step, with nothing else
// on the screen; this says how far it is. Quiet for the first `quiet_s` seconds, so the CPU and a
// warm start print nothing. On a terminal one line is rewritten in place ("\r"); into a file or a
// pipe a line every `every_s` seconds. A final line, once anything was shown, gives the total.
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

namespace kiln {

class PrepareProgress {
 public:
  using Clock = std::chrono::steady_clock;
  struct Settings {
    double quiet_s = 2;   // nothing before this
    double every_s = 10;  // between lines when not on a terminal
    bool terminal = false;
  };
  // `write` receives each piece of text (stderr's by default: kiln's messages go there).
  // `start`: when preparing began (tests pass their own clock's).
  PrepareProgress(int total_ops, Settings settings, std::function<void(const std::string&)> write,
                  Clock::time_point start = Clock::now());
  // Stderr, rewriting in place when it is a terminal.
  static PrepareProgress to_stderr(int total_ops);

  // What the backend adds to a line, e.g. the cuDNN plans tuned so far ("" for nothing); asked for
  // only when a line is written.
  using Detail = std::function<std::string()>;
  // After op `done` (1-based) of the total. `now` is for tests; real callers use the clock.
  void op_done(int done, const Detail& detail, Clock::time_point now = Clock::now());
  // Once every op is prepared.
  void finish(const Detail& detail, Clock::time_point now = Clock::now());

 private:
  std::string line(int done, const std::string& detail, double seconds) const;

  int total_;
  Settings settings_;
  std::function<void(const std::string&)> write_;
  Clock::time_point start_;
  double last_shown_s_ = -1;  // < 0: nothing shown yet
};

}  // namespace kiln
