#pragma once
// The e2e tests' training run of a small model on the 5,000 real digits (the shared folder): batch
// 64, SGD with momentum 0.9, learning rate 0.05, seed 1. Prints and returns the first and last
// epochs' training loss and the last one's test accuracy.
#include <cstdio>
#include <utility>

#include "kiln/trainer.h"
#include "support/program_fixture.h"

namespace kiln::testing {

struct DigitsRun {
  double first_loss, last_loss, test_accuracy;
};

// The digits' training and test sets, read once per test binary.
inline const std::pair<Dataset, Dataset>& digits_sets() {
  static const std::pair<Dataset, Dataset> sets = [] {
    const std::string dir = shared_digits_dir();
    return std::make_pair(load_dataset(dir, "idx", true), load_dataset(dir, "idx", false));
  }();
  return sets;
}

inline DigitsRun train_on_digits(const Blueprint& model, int epochs, const char* label) {
  CompileOptions c;
  c.batch = 64;
  c.optimizer.set("momentum", 0.9);
  TrainOptions t;
  t.epochs = epochs;
  t.schedule.lr = 0.05f;
  t.seed = 1;
  Trainer trainer(model, c, t);
  const auto reports = trainer.fit(digits_sets().first, digits_sets().second);
  const DigitsRun run{reports.front().train_loss, reports.back().train_loss, reports.back().test_accuracy};
  std::printf("%-10s loss %.4f -> %.4f, test accuracy %.4f\n", label, run.first_loss, run.last_loss,
              run.test_accuracy);
  return run;
}

}  // namespace kiln::testing
