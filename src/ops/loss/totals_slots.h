#pragma once
// The slots of ACCUMULATE_TOTALS's F64 totals (loss_contract.h), the layout of COUNT_CORRECT's I32
// hit counts it reads, and the rule that adds one run to the totals, shared by its CPU kernel, its
// CUDA kernel (one thread) and the trainer; plain C++ so that CUDA sources can include it.
//
// Running totals of an epoch's training steps, or of one evaluation pass, kept on the device: the
// trainer resets them, runs its steps without reading anything back (so the host can queue the
// next steps while the GPU works), and reads them when it reports. Each run adds the step's loss
// and hits and counts the step; the first non-finite loss is recorded with its optimizer step
// (StepScalars::step), so a diverged run is still named to the step.
#include <cstdint>

#include "core/host_device.h"

namespace kiln {

// COUNT_CORRECT's output, I32 [kCorrectSlots]: the rows whose label ranks among the first 1, and
// among the first kTopK, classes (loss_contract.h defines the rank).
enum CorrectSlot : int {
  kTop1Hits,
  kTop5Hits,
  kCorrectSlots,
};
constexpr int kTopK = 5;  // the k of kTop5Hits

enum TotalsSlot : int {
  kLossSum,        // sum of the losses counted
  kHitsSum,        // sum of the top-1 hits
  kStepsCounted,   // runs of the op since the reset
  kFirstBadStep,   // the optimizer step of the first non-finite loss; -1 while there is none
  kFirstBadLoss,   // that loss (NaN or infinity)
  kTop5HitsSum,    // sum of the top-5 hits
  kTotalsSlots,
};

// Adds one run's loss (nullptr when evaluating), top-1 and top-5 hits to totals[kTotalsSlots],
// counts the run, and records the first non-finite loss at optimizer step `step`.
KILN_HOST_DEVICE inline void add_run_to_totals(double* totals, const double* loss, int32_t top1_hits,
                                               int32_t top5_hits, int64_t step) {
  if (loss) {
    totals[kLossSum] += *loss;
    // x - x is 0 for every finite x and NaN for an infinity or a NaN: one test for both compilers.
    if (!(*loss - *loss == 0.0) && totals[kFirstBadStep] < 0) {
      totals[kFirstBadStep] = double(step);
      totals[kFirstBadLoss] = *loss;
    }
  }
  totals[kHitsSum] += top1_hits;
  totals[kTop5HitsSum] += top5_hits;
  totals[kStepsCounted] += 1;
}

}  // namespace kiln
