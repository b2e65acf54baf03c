#include "runtime/prepare_progress.h"

#include <fmt/format.h>
#include <unistd.h>

namespace kiln {

PrepareProgress::PrepareProgress(int total_ops, Settings settings, std::function<void(const std::string&)> write,
                                 Clock::time_point start)
    : total_(total_ops), settings_(settings), write_(std::move(write)), start_(start) {}

PrepareProgress PrepareProgress::to_stderr(int total_ops) {
  Settings s;
  s.terminal = ::isatty(STDERR_FILENO) == 1;
  return PrepareProgress(total_ops, s, [](const std::string& text) {
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  });
}

std::string PrepareProgress::line(int done, const std::string& detail, double seconds) const {
  return fmt::format("kiln: preparing the program: op {}/{}{}{}, {:.0f} s", done, total_, detail.empty() ? "" : "; ",
                     detail, seconds);
}

void PrepareProgress::op_done(int done, const Detail& detail, Clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (seconds < settings_.quiet_s) return;
  if (settings_.terminal) {
    // In place: rewriting costs nothing, but a few times a second is all a reader can follow.
    if (last_shown_s_ >= 0 && seconds - last_shown_s_ < 0.25) return;
    write_(fmt::format("\r{}\x1b[K", line(done, detail(), seconds)));  // erase what a longer line left
  } else {
    if (last_shown_s_ >= 0 && seconds - last_shown_s_ < settings_.every_s) return;
    write_(fmt::format("{}\n", line(done, detail(), seconds)));
  }
  last_shown_s_ = seconds;
}

void PrepareProgress::finish(const Detail& detail_of, Clock::time_point now) {
  if (last_shown_s_ < 0) return;  // a quick start says nothing
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const std::string detail = detail_of();
  const std::string text = fmt::format("kiln: prepared the program's {} ops in {:.1f} s{}{}", total_, seconds,
                                       detail.empty() ? "" : "; ", detail);
  write_(settings_.terminal ? fmt::format("\r{}\x1b[K\n", text) : fmt::format("{}\n", text));
}

}  // namespace kiln
