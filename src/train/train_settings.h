#pragma once
// The rows of kiln::TrainOptions' own settings (kiln/trainer.h): the epochs, the learning-rate
// schedule (LrSchedule, kiln/schedule.h: its kind, peak rate, warm-up, step length and decay) and
// the seed; one each, with the flag `kiln train` takes and whether a resumed run must match it.
// They sit with the struct they fill, above the settings schema (src/settings), which may not
// include training. The data's rows (the augmentation, the loader) are tools/cli/data_settings.h's.
#include <vector>

#include "kiln/trainer.h"
#include "settings/setting.h"

namespace kiln {

// Over TrainOptions, in the order --help lists them.
const std::vector<Setting>& train_settings();

// The row of `key` (a kiln::Error, internal, when there is none: the callers name rows that exist).
const Setting& train_setting(const char* key);

}  // namespace kiln
