#pragma once
// Runs the built `kiln` binary as a user does (stdout and stderr together) for the CLI tests.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace kiln::testing {

struct Result {
  int rc = -1;
  std::string output;
};

inline const std::string kKilnBinary = KILN_BINARY_DIR "/kiln";

// Runs a shell command line, stdout and stderr together: its exit status and output.
inline Result run_command(const std::string& command) {
  Result r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return r;
  }
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline bool kiln_built() {
  if (std::filesystem::exists(kKilnBinary)) return true;
  ADD_FAILURE() << kKilnBinary << " is missing: build the kiln_cli target first";
  return false;
}

inline Result kiln(const std::string& args) {
  if (!kiln_built()) return {};
  return run_command("'" + kKilnBinary + "' " + args + " 2>&1");
}

// kiln ARGS under timeout(1): rc 124 when it ran past `seconds` (a hang), which fails the test,
// the output kept.
inline Result kiln_within(int seconds, const std::string& args) {
  if (!kiln_built()) return {};
  const Result r = run_command("timeout -k 5 " + std::to_string(seconds) + " '" + kKilnBinary + "' " + args + " 2>&1");
  EXPECT_NE(r.rc, 124) << "kiln " << args << " ran past " << seconds << " s:\n" << r.output;
  return r;
}

inline void expect_contains(const Result& r, const std::vector<std::string>& parts, const std::string& args) {
  for (const std::string& part : parts)
    EXPECT_NE(r.output.find(part), std::string::npos) << "kiln " << args << "\nexpected '" << part << "' in:\n"
                                                      << r.output;
}

// The number after the last "test accuracy: " in a run's output; -1 when there is none.
inline double test_accuracy(const Result& r) {
  const size_t at = r.output.rfind("test accuracy: ");
  return at == std::string::npos ? -1.0 : std::stod(r.output.substr(at + 15));
}

}  // namespace kiln::testing
