#include "kiln/schedule.h"

#include <cmath>

#include "kiln/error.h"

namespace kiln {

float LrSchedule::at(int64_t step, int64_t steps_per_epoch, int total_epochs) const {
  const int64_t warmup = int64_t(warmup_epochs) * steps_per_epoch;
  if (step < warmup) return lr * float(step + 1) / float(warmup);
  switch (kind) {
    case ScheduleKind::Constant: return lr;
    case ScheduleKind::Step: return lr * std::pow(gamma, float(step / steps_per_epoch / std::max(step_epochs, 1)));
    case ScheduleKind::Cosine: {
      const int64_t total = std::max<int64_t>(int64_t(total_epochs) * steps_per_epoch - warmup, 1);
      const double t = double(step - warmup) / double(total);
      return float(0.5 * lr * (1.0 + std::cos(3.141592653589793 * std::min(t, 1.0))));
    }
  }
  return lr;
}

ScheduleKind parse_schedule(const std::string& text) {
  if (text == "constant") return ScheduleKind::Constant;
  if (text == "cosine") return ScheduleKind::Cosine;
  if (text == "step") return ScheduleKind::Step;
  fail("unknown schedule '{}': use constant, cosine or step", text);
}

}  // namespace kiln
