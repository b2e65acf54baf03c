#pragma once
// The slots of ACCUMULATE_TOTALS's F64 totals (loss_contract.h), shared by its CPU and CUDA
// kernels and the trainer; plain C++ so that CUDA sources can include it.
//
// Running totals of an epoch's training steps, or of one evaluation pass, kept on the device: the
// trainer resets them, runs its steps without reading anything back (so the host can queue the
// next steps while the GPU works), and reads them when it reports. Each run adds the step's loss
// and hits and counts the step; the first non-finite loss is recorded with its optimizer step
// (StepScalars::step), so a diverged run is still named to the step.
namespace kiln {

enum TotalsSlot : int {
  kLossSum,        // sum of the losses counted
  kHitsSum,        // sum of the hits
  kStepsCounted,   // runs of the op since the reset
  kFirstBadStep,   // the optimizer step of the first non-finite loss; -1 while there is none
  kFirstBadLoss,   // that loss (NaN or infinity)
  kTotalsSlots,
};

}  // namespace kiln
