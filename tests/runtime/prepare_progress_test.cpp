// The progress line while a program is prepared, on a clock the test moves: quiet at first, then
// a line every few seconds into a file, rewritten in place on a terminal, and a total at the end
// only when something was shown.
#include "runtime/prepare_progress.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kiln {
namespace {

using Clock = PrepareProgress::Clock;

struct Written {
  std::vector<std::string> pieces;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& text) { pieces.push_back(text); };
  }
};

Clock::time_point at(Clock::time_point start, double seconds) {
  return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

TEST(PrepareProgress, AQuickPrepareSaysNothing) {
  Written w;
  const Clock::time_point t0 = Clock::now();
  PrepareProgress p(40, {}, w.sink(), t0);
  int asked = 0;  // the detail costs nothing while nothing is shown
  const PrepareProgress::Detail detail = [&] {
    ++asked;
    return std::string();
  };
  for (int i = 1; i <= 40; ++i) p.op_done(i, detail, at(t0, i * 0.01));
  p.finish(detail, at(t0, 0.5));
  EXPECT_EQ(asked, 0);
  EXPECT_TRUE(w.pieces.empty());
}

TEST(PrepareProgress, IntoAFileALineEveryFewSecondsThenTheTotal) {
  Written w;
  const Clock::time_point t0 = Clock::now();
  PrepareProgress::Settings s;
  s.quiet_s = 2, s.every_s = 10, s.terminal = false;
  PrepareProgress p(200, s, w.sink(), t0);
  // One op a second for 25 s: quiet until 2 s, then lines at 2.5 s, 12.5 s and 22.5 s.
  for (int i = 1; i <= 25; ++i) p.op_done(i, [i] { return "cuDNN graphs: " + std::to_string(i); }, at(t0, i + 0.5));
  ASSERT_EQ(w.pieces.size(), 3u);
  EXPECT_EQ(w.pieces[0], "kiln: preparing the program: op 2/200; cuDNN graphs: 2, 2 s\n");  // 2.5 s, rounded down
  EXPECT_EQ(w.pieces[1], "kiln: preparing the program: op 12/200; cuDNN graphs: 12, 12 s\n");
  EXPECT_EQ(w.pieces[2], "kiln: preparing the program: op 22/200; cuDNN graphs: 22, 22 s\n");
  p.finish([] { return std::string("cuDNN graphs: 25"); }, at(t0, 26));
  ASSERT_EQ(w.pieces.size(), 4u);
  EXPECT_EQ(w.pieces[3], "kiln: prepared the program's 200 ops in 26.0 s; cuDNN graphs: 25\n");
}

TEST(PrepareProgress, OnATerminalOneLineIsRewrittenInPlace) {
  Written w;
  const Clock::time_point t0 = Clock::now();
  PrepareProgress::Settings s;
  s.terminal = true;
  PrepareProgress p(10, s, w.sink(), t0);
  const PrepareProgress::Detail none = [] { return std::string(); };
  for (int i = 1; i <= 10; ++i) p.op_done(i, none, at(t0, 2 + i * 0.5));
  ASSERT_EQ(w.pieces.size(), 10u);
  for (const std::string& piece : w.pieces) {
    EXPECT_EQ(piece.front(), '\r');
    EXPECT_EQ(piece.find('\n'), std::string::npos);
  }
  EXPECT_EQ(w.pieces.back(), "\rkiln: preparing the program: op 10/10, 7 s\x1b[K");
  p.finish(none, at(t0, 8));
  EXPECT_EQ(w.pieces.back(), "\rkiln: prepared the program's 10 ops in 8.0 s\x1b[K\n");
}

}  // namespace
}  // namespace kiln
