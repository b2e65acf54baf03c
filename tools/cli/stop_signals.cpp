#include "cli/stop_signals.h"

#include <cerrno>

namespace kiln::cli {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

void on_stop_signal(int sig) {
  const int saved_errno = errno;
  int none = 0;
  if (g_stop_signal.compare_exchange_strong(none, sig)) {
    g_stop.store(true);
  } else {
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    ::sigaction(sig, &default_action, nullptr);
    ::raise(sig);  // blocked while this handler runs: delivered, and fatal, as it returns
  }
  errno = saved_errno;
}

}  // namespace

StopSignals::StopSignals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // the loader's reads go on undisturbed
  for (int i = 0; i < 2; ++i) {
    ::sigaction(kSignals[i], nullptr, &old_[i]);
    if (old_[i].sa_handler != SIG_IGN) ::sigaction(kSignals[i], &action, nullptr);
  }
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 2; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
}

const std::atomic<bool>* stop_requested() { return &g_stop; }

int stop_signal() { return g_stop_signal.load(); }

}  // namespace kiln::cli
