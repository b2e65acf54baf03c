#include "train/train_settings.h"

#include "kiln/error.h"

namespace kiln {
namespace {

// The schedule's rows, declared on LrSchedule: its step length and decay apply to the step
// schedule only.
std::vector<Setting> schedule_settings() {
  using S = LrSchedule;
  auto step_only = [](const void* o) { return static_cast<const S*>(o)->kind == ScheduleKind::Step; };
  std::vector<Setting> rows = {
      choice_setting<S, ScheduleKind>({.key = "schedule",
                                       .flag = "--schedule",
                                       .help = "constant, cosine or step",
                                       .member = "TrainOptions::schedule.kind",
                                       .compared_on_resume = true},
                                      &S::kind,
                                      {{"constant", ScheduleKind::Constant},
                                       {"cosine", ScheduleKind::Cosine},
                                       {"step", ScheduleKind::Step}}),
      real_setting<S>({.key = "lr",
                       .flag = "--lr",
                       .help = "peak learning rate, > 0",
                       .member = "TrainOptions::schedule.lr",
                       .fix = "use e.g. --lr 0.05 (SGD) or --lr 0.001 (AdamW)",
                       .compared_on_resume = true},
                      &S::lr, {0, kUnbounded, true, false}),
      count_setting<S>({.key = "warmup",
                        .flag = "--warmup",
                        .help = "warm-up epochs (linear), >= 0",
                        .member = "TrainOptions::schedule.warmup_epochs",
                        .fix = "use e.g. --warmup 2, or 0 for no warm-up",
                        .compared_on_resume = true},
                       &S::warmup_epochs, {0, kUnbounded}),
      count_setting<S>({.key = "step_epochs",
                        .flag = "--step-epochs",
                        .help = "step schedule: epochs between decays, >= 1",
                        .member = "TrainOptions::schedule.step_epochs",
                        .fix = "use e.g. --step-epochs 30",
                        .compared_on_resume = true},
                       &S::step_epochs, {1, kUnbounded}),
      real_setting<S>({.key = "gamma",
                       .flag = "--gamma",
                       .help = "step schedule: decay factor, in (0, 1]",
                       .member = "TrainOptions::schedule.gamma",
                       .fix = "use e.g. --gamma 0.1",
                       .compared_on_resume = true},
                      &S::gamma, {0, 1, true, false}),
  };
  for (Setting& row : rows)
    if (row.info.key == std::string("step_epochs") || row.info.key == std::string("gamma")) {
      row.applies = step_only;
      row.decided_by = "schedule";
    }
  return rows;
}

}  // namespace

const std::vector<Setting>& train_settings() {
  using T = TrainOptions;
  static const std::vector<Setting> rows = [] {
    std::vector<Setting> r = {
        count_setting<T>({.key = "epochs",
                          .flag = "--epochs",
                          .alias = "-e",
                          .help = "epochs, >= 1",
                          .member = "TrainOptions::epochs",
                          .fix = "use e.g. --epochs 10"},
                         &T::epochs, {1, kUnbounded}),
    };
    for (Setting& s : settings_within(schedule_settings(), &T::schedule)) r.push_back(std::move(s));
    r.push_back(count_setting<T>({.key = "seed",
                                  .flag = "--seed",
                                  .help = "random seed (init, shuffling, augmentation, dropout), 0 to 2^64-1",
                                  .member = "TrainOptions::seed",
                                  .fix = "use e.g. --seed 1",
                                  .compared_on_resume = true},
                                 &T::seed, {0, kUint64Max}));
    return r;
  }();
  return rows;
}

const Setting& train_setting(const char* key) {
  const Setting* row = find_setting(train_settings(), key);
  if (!row) fail("internal: no train setting '{}'", key);
  return *row;
}

}  // namespace kiln
