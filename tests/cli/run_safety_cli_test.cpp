// `kiln train` never silently destroys an earlier run, says what it does with its checkpoint, and
// its log survives a kill: an existing checkpoint without --resume is refused before any work
// (naming the file, --resume and --overwrite), --overwrite replaces it, --resume says whether it
// resumed or started fresh, and stdout into a file is written line by line.
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
#include "support/temp_dir.h"

namespace {

using kiln::testing::contains;
using kiln::testing::read_text;
using kiln::testing::write_first_digits;
using kiln::testing::expect_contains;
using kiln::testing::kiln;
using kiln::testing::read_bytes;
using kiln::testing::Result;
using kiln::testing::TempDir;

// Small and fast: the digits on the CPU, big batches, one loader thread.
std::string digits_train(const std::string& dir) {
  return "train --model digits_cnn --device cpu --data " + dir + " --batch 256 --workers 1 ";
}

// Refused before any work: no dataset is even opened (the data path does not exist).
TEST(RunSafetyCli, AnExistingCheckpointWithoutResumeIsRefusedBeforeAnyWork) {
  TempDir tmp;
  const std::string ckpt = tmp.file("b.safetensors");
  kiln::testing::write_bytes(ckpt, {1, 2, 3, 4, 5, 6, 7, 8});  // the rule looks at no byte of it
  const std::string args = "train --data /nonexistent/kiln_run_safety_data --checkpoint " + ckpt;
  const Result r = kiln(args);
  EXPECT_NE(r.rc, 0) << r.output;
  expect_contains(r, {"checkpoint '" + ckpt + "' already exists", "--resume", "--overwrite", "another checkpoint path"},
                  args);
  EXPECT_FALSE(contains(r.output, "dataset directory")) << "the data was opened first:\n" << r.output;
  EXPECT_FALSE(contains(r.output, "kiln: training")) << r.output;
  EXPECT_EQ(read_bytes(ckpt), (std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_FALSE(std::filesystem::exists(ckpt + ".lock"));
}

// The whole story with real runs: a forgotten --resume is refused and changes nothing, --resume
// continues and says from which epoch, --overwrite starts over.
TEST(RunSafetyCli, AnEarlierRunIsResumedOrReplacedOnlyWhenAskedTo) {
  const std::string dir = kiln::testing::shared_digits_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte")) GTEST_SKIP() << "no digits at " << dir;
  TempDir tmp;
  write_first_digits(dir, tmp.file("digits"), 512, 128);
  const std::string ckpt = tmp.file("b.safetensors");
  const std::string train = digits_train(tmp.file("digits")) + "--checkpoint " + ckpt + " ";

  // --resume with nothing there yet: starts fresh, and says so.
  std::string args = train + "--epochs 1 --resume";
  Result r = kiln(args);
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"kiln: no checkpoint at " + ckpt + " yet: starting fresh", "\nepoch 1/1  loss"}, args);
  ASSERT_TRUE(std::filesystem::exists(ckpt));
  const std::vector<uint8_t> first = read_bytes(ckpt);

  // The same command without --resume: refused, the file's bytes unchanged, nothing trained.
  args = train + "--epochs 2";
  r = kiln(args);
  EXPECT_NE(r.rc, 0) << r.output;
  expect_contains(r, {"'" + ckpt + "' already exists", "--resume", "--overwrite"}, args);
  EXPECT_FALSE(contains(r.output, "epoch 1/")) << r.output;
  EXPECT_EQ(read_bytes(ckpt), first);
  EXPECT_FALSE(std::filesystem::exists(ckpt + ".lock"));

  // --resume continues it from where it stopped.
  args = train + "--epochs 2 --resume";
  r = kiln(args);
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"kiln: resumed from " + ckpt + ": epoch 1 of 2 done", "\nepoch 2/2  loss"}, args);
  EXPECT_FALSE(contains(r.output, "epoch 1/2")) << r.output;
  EXPECT_FALSE(contains(r.output, "starting fresh")) << r.output;
  EXPECT_EQ(kiln::load_safetensors(ckpt).metadata.at("epochs_done"), "2");

  // --overwrite starts over and replaces it.
  args = train + "--epochs 1 --overwrite";
  r = kiln(args);
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"kiln: starting fresh; checkpoints go to " + ckpt, "--overwrite", "\nepoch 1/1  loss"}, args);
  EXPECT_EQ(kiln::load_safetensors(ckpt).metadata.at("epochs_done"), "1");
  EXPECT_EQ(kiln::load_safetensors(ckpt).metadata.at("epochs"), "1");
}

// `kiln train > log` killed after its first epoch: the log already holds the startup lines and
// that epoch's line (stdio would have buffered them all until exit).
TEST(RunSafetyCli, ALogInAFileSurvivesAKill) {
  const std::string dir = kiln::testing::shared_digits_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte")) GTEST_SKIP() << "no digits at " << dir;
  ASSERT_TRUE(std::filesystem::exists(kiln::testing::kKilnBinary)) << "build the kiln_cli target first";
  TempDir tmp;
  const std::string log = tmp.file("train.log"), ckpt = tmp.file("run.safetensors");
  const std::vector<std::string> args = {kiln::testing::kKilnBinary, "train", "--model", "digits_cnn", "--device",
                                         "cpu", "--data", dir, "--epochs", "3", "--batch", "256", "--workers", "1",
                                         "--checkpoint", ckpt};
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // kiln train ... > train.log 2>&1
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) ::_exit(126);
    ::dup2(fd, 1), ::dup2(fd, 2), ::close(fd);
    ::alarm(300);  // never outlive a test that failed
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  // Polls the log until the first epoch's line is in it, kiln ends, or two minutes pass.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool seen = false, running = true;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    seen = contains(read_text(log), "\nepoch 1/3  loss");
    if (seen) break;
    if (::waitpid(child, &status, WNOHANG) == child) {
      running = false;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (running) {
    ::kill(child, SIGKILL);
    ASSERT_EQ(::waitpid(child, &status, 0), child);
  }
  const std::string text = read_text(log);
  ASSERT_TRUE(running) << "kiln ended (status " << status << ") before its log showed the first epoch; the log:\n"
                       << text;
  ASSERT_TRUE(seen) << "no epoch line in the log after 2 minutes:\n" << text;
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  const std::vector<std::string> parts = {"kiln: training digits_cnn on " + dir,
                                          "kiln: starting fresh; checkpoints go to " + ckpt, "\nepoch 1/3  loss",
                                          "test acc"};
  for (const std::string& part : parts)
    EXPECT_TRUE(contains(text, part)) << "'" << part << "' is not in the killed run's log:\n" << text;
  EXPECT_FALSE(contains(text, "epoch 3/3")) << text;
}

}  // namespace
