// Ctrl-C (SIGINT) or SIGTERM stops `kiln train` cleanly: it finishes the step under way, says
// where it stopped and what the checkpoint holds, releases the checkpoint's lock, leaves no
// temporary file and exits with 128 + the signal (130, 143). A second signal stops it at once. A
// temporary left by a writer killed mid-write is removed by the next run on that checkpoint.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/checkpoint.h"
#include "support/kiln_cli.h"
#include "support/program_fixture.h"
#include "support/dead_pid.h"
#include "support/temp_dir.h"

namespace {

using kiln::testing::contains;
using kiln::testing::read_text;
using kiln::testing::dead_pid;
using kiln::testing::write_first_digits;
using kiln::testing::read_bytes;
using kiln::testing::TempDir;

// The files in `dir` whose names start with `prefix`.
std::vector<std::string> files_starting(const std::filesystem::path& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().starts_with(prefix)) names.push_back(entry.path().filename().string());
  return names;
}

struct Outcome {
  int status = 0;
  std::string log;
};

// `kiln train` (3 epochs of 1,024 digits, batch 32) into `ckpt`, its output into a log file;
// once the first epoch's line is in the log, `signals` are sent one right after the other.
Outcome train_and_signal(const TempDir& tmp, const std::string& ckpt, const std::vector<int>& signals) {
  Outcome run;
  const std::string dir = kiln::testing::shared_digits_dir();
  const std::string data = tmp.file("digits"), log = tmp.file("train.log");
  write_first_digits(dir, data, 1024, 128);
  const std::vector<std::string> args = {kiln::testing::kKilnBinary, "train", "--model", "digits_cnn", "--device",
                                         "cpu", "--data", data, "--epochs", "3", "--batch", "32", "--workers", "1",
                                         "--checkpoint", ckpt};
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  if (child < 0) {
    ADD_FAILURE() << "fork failed";
    return run;
  }
  if (child == 0) {  // kiln train ... > train.log 2>&1, with the signals' default actions, as at a terminal
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) ::_exit(126);
    ::dup2(fd, 1), ::dup2(fd, 2), ::close(fd);
    ::signal(SIGINT, SIG_DFL), ::signal(SIGTERM, SIG_DFL);
    ::alarm(300);  // never outlive a test that failed
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool seen = false, running = true;
  while (std::chrono::steady_clock::now() < deadline) {
    seen = contains(read_text(log), "\nepoch 1/3  loss");
    if (seen) break;
    if (::waitpid(child, &run.status, WNOHANG) == child) {
      running = false;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (running) {
    for (int sig : seen ? signals : std::vector<int>{SIGKILL}) ::kill(child, sig);
    ::waitpid(child, &run.status, 0);
  }
  run.log = read_text(log);
  EXPECT_TRUE(running) << "kiln ended (status " << run.status << ") before the first epoch's line:\n" << run.log;
  EXPECT_TRUE(seen) << "no epoch line in the log after 2 minutes:\n" << run.log;
  return run;
}

void expect_clean_stop(const Outcome& run, const TempDir& tmp, const std::string& ckpt, const std::string& name,
                       int code) {
  ASSERT_TRUE(WIFEXITED(run.status)) << "status " << run.status << "; the log:\n" << run.log;
  EXPECT_EQ(WEXITSTATUS(run.status), code) << run.log;
  EXPECT_TRUE(contains(run.log, "\nkiln: stopped by " + name + " at epoch 2/3, step ")) << run.log;
  EXPECT_TRUE(contains(run.log, "/32; " + ckpt + " holds epoch 1 (resume with --resume)\n")) << run.log;
  EXPECT_FALSE(contains(run.log, "epoch 2/3  loss")) << run.log;
  EXPECT_FALSE(contains(run.log, "error")) << run.log;
  EXPECT_FALSE(std::filesystem::exists(ckpt + ".lock"));
  EXPECT_EQ(files_starting(tmp.path(), "run.safetensors.tmp."), std::vector<std::string>{});
  EXPECT_EQ(kiln::load_safetensors(ckpt).metadata.at("epochs_done"), "1");
}

bool have_digits() {
  return std::filesystem::exists(kiln::testing::shared_digits_dir() + "/train-images-idx3-ubyte") &&
         std::filesystem::exists(kiln::testing::kKilnBinary);
}

TEST(StopCli, SigintStopsAfterTheStepWith130) {
  if (!have_digits()) GTEST_SKIP() << "no digits or no kiln binary";
  TempDir tmp;
  const std::string ckpt = tmp.file("run.safetensors");
  const Outcome run = train_and_signal(tmp, ckpt, {SIGINT});
  expect_clean_stop(run, tmp, ckpt, "SIGINT", 130);
}

// Also: the temporary of a writer that no longer runs is removed (and said so); one of a running
// process (this test's) is left alone.
TEST(StopCli, SigtermStopsAfterTheStepWith143AndStaleTemporariesGo) {
  if (!have_digits()) GTEST_SKIP() << "no digits or no kiln binary";
  TempDir tmp;
  const std::string ckpt = tmp.file("run.safetensors");
  const std::string stale = ckpt + ".tmp." + std::to_string(dead_pid());
  const std::string live = ckpt + ".tmp." + std::to_string(::getpid());
  kiln::testing::write_bytes(stale, std::vector<uint8_t>(4096, 7));
  kiln::testing::write_bytes(live, std::vector<uint8_t>(4096, 7));
  const Outcome run = train_and_signal(tmp, ckpt, {SIGTERM});
  EXPECT_TRUE(contains(run.log, "kiln: removed 1 temporary file of a checkpoint write that was interrupted: " +
                                    stale + "\n"))
      << run.log;
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(live));
  std::filesystem::remove(live);
  expect_clean_stop(run, tmp, ckpt, "SIGTERM", 143);
}

TEST(StopCli, ASecondSignalStopsAtOnce) {
  if (!have_digits()) GTEST_SKIP() << "no digits or no kiln binary";
  TempDir tmp;
  const std::string ckpt = tmp.file("run.safetensors");
  const Outcome run = train_and_signal(tmp, ckpt, {SIGINT, SIGTERM});
  // Whichever of the two is handled second takes its default action: killed by it, no stop line.
  ASSERT_TRUE(WIFSIGNALED(run.status)) << "status " << run.status << "; the log:\n" << run.log;
  EXPECT_TRUE(WTERMSIG(run.status) == SIGINT || WTERMSIG(run.status) == SIGTERM) << WTERMSIG(run.status);
  EXPECT_FALSE(contains(run.log, "kiln: stopped by")) << run.log;
}

}  // namespace
