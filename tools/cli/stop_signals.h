#pragma once
// Ctrl-C and SIGTERM while `kiln train` trains: a clean stop (TrainOptions::stop). The first
// signal only sets a flag (nothing else is async-signal-safe in a handler): the trainer finishes
// its step and throws kiln::Stopped, and the command says where it stopped. A second one, of
// either kind, takes the signal's default action at once.
#include <signal.h>

#include <atomic>

namespace kiln::cli {

// Installs the handler for SIGINT and SIGTERM for its lifetime (a signal the process was started
// ignoring, as `nohup` or `cmd &` leave SIGINT, stays ignored), then puts the old actions back.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr int kSignals[2] = {SIGINT, SIGTERM};
  struct sigaction old_[2] {};
};

// Set by the first signal: for TrainOptions::stop.
const std::atomic<bool>* stop_requested();

// The signal that asked for the stop (SIGINT or SIGTERM); 0 while none has.
int stop_signal();

}  // namespace kiln::cli
