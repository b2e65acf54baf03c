#pragma once
// The per-epoch JSON lines `kiln train --json FILE` appends (one object a line: epoch, train_loss,
// train_accuracy, test_accuracy, lr, ...), read back for `kiln plot`.
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct EpochLine {
  int line = 0;  // in the file, from 1
  int epoch = 0;
  double train_loss = 0, train_accuracy = 0;
  std::optional<double> test_accuracy;  // null without a test set
  std::optional<double> lr;             // absent in files of kiln before it was written
};

struct RunLog {
  std::vector<EpochLine> epochs;  // of the last run in the file
  // --json appends, so a file may hold several runs: a run starts where the epoch does not
  // follow the one before (a resumed run continues its epochs, and so stays one run).
  int runs = 0;
};

// Reads `path`; blank lines are skipped. kiln::Error naming the file and the line for a line that
// is not a JSON object or lacks a numeric epoch, train_loss or train_accuracy (or holds another type
// where a number or null belongs), and for a file without any epoch line.
RunLog read_run_log(const std::string& path);

}  // namespace kiln
