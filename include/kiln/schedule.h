#pragma once
#include <cstdint>
#include <string>

namespace kiln {

enum class ScheduleKind : uint8_t { Constant, Cosine, Step };

// Learning rate as a function of the optimizer step. Warm-up rises linearly from lr/warmup
// to lr over `warmup_epochs`; cosine then decays to 0 at the end of training (per step);
// step multiplies by `gamma` every `step_epochs` epochs. The Trainer refuses a warm-up not shorter
// than the run (it would never reach `lr`).
struct LrSchedule {
  ScheduleKind kind = ScheduleKind::Cosine;
  float lr = 0.1f;
  int warmup_epochs = 0;
  int step_epochs = 30;
  float gamma = 0.1f;

  float at(int64_t step, int64_t steps_per_epoch, int total_epochs) const;
};

ScheduleKind parse_schedule(const std::string& text);  // throws kiln::Error

}  // namespace kiln
