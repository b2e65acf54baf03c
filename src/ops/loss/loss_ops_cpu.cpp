// Op wrappers binding SOFTMAX_CE and COUNT_CORRECT to the CPU loss kernels (loss_cpu.h): they
// validate the tensors an op was compiled with, then dispatch on dtype.
#include <string>

#include "ops/loss/loss_checks.h"
#include "ops/loss/loss_contract.h"
#include "ops/loss/loss_cpu.h"
#include "ops/loss_scale/loss_scale_checks.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

void softmax_ce(const OpCall& call, const SoftmaxCrossEntropy<TensorArg>& a) {
  const std::string& name = call.layer().name;
  const std::string who = fmt::format("softmax_cross_entropy '{}'", name);
  const auto [N, C] = loss::logits_and_labels(who, a.logits, a.labels);
  loss_scale::expect_optional_scalar(who, a.loss_scale, "loss scale", DType::F32);
  if (a.loss.numel() != 1 || a.loss.dtype() != a.logits.dtype())
    fail("softmax_cross_entropy '{}': loss tensor is {} {}, expected {} [1]", name,
         dtype_name(a.loss.dtype()), shape_str(a.loss.shape()), dtype_name(a.logits.dtype()));
  if (a.dlogits && (a.dlogits.numel() != N * C || a.dlogits.dtype() != a.logits.dtype()))
    fail("softmax_cross_entropy '{}': dlogits is {} {}, expected {} {}", name,
         dtype_name(a.dlogits.dtype()), shape_str(a.dlogits.shape()), dtype_name(a.logits.dtype()),
         shape_str(a.logits.shape()));
  const double smoothing = a.label_smoothing;
  if (!(smoothing >= 0.0 && smoothing <= 1.0))
    fail("softmax_cross_entropy '{}': label_smoothing {} is outside [0, 1]; use e.g. 0.1", name,
         smoothing);
  const int32_t* label_data = a.labels.as<int32_t>();
  if (int64_t bad = cpu::find_bad_label(label_data, N, C); bad >= 0)
    fail("softmax_cross_entropy '{}': label {} at batch index {} is outside [0, {}); the dataset "
         "has more classes than the model's {} outputs, or the labels are corrupt",
         name, label_data[bad], bad, C, C);
  dispatch_float(a.logits.dtype(), "SOFTMAX_CE", [&](auto t) {
    using T = decltype(t);
    double value = cpu::softmax_cross_entropy<T>(a.logits.as<T>(), label_data, N, C, smoothing,
                                                 a.dlogits ? a.dlogits.as<T>() : nullptr);
    a.loss.as<T>()[0] = static_cast<T>(value);
    // CPU dlogits are fp32/fp64, where scaling after the rounding is exact for the power-of-two
    // scales the scaler keeps.
    if (a.loss_scale && a.dlogits) {
      const T scale = static_cast<T>(a.loss_scale.as<float>()[0]);
      T* d = a.dlogits.as<T>();
      for (int64_t i = 0; i < N * C; ++i) d[i] *= scale;
    }
  });
}

// correct[kTop1Hits], correct[kTop5Hits]: the rows whose label ranks below 1 and below 5
// (loss_contract.h); labels outside [0, classes) never count (the trainer marks a padded batch's
// extra rows -1).
void count_correct(const OpCall& call, const CountCorrect<TensorArg>& a) {
  const std::string who = fmt::format("count_correct '{}'", call.layer().name);
  const auto [N, C] = loss::logits_and_labels(who, a.logits, a.labels);
  loss::expect_correct(who, a.correct);
  dispatch_float(a.logits.dtype(), "COUNT_CORRECT", [&](auto t) {
    using T = decltype(t);
    const cpu::TopHits hits = cpu::count_correct<T>(a.logits.as<T>(), a.labels.as<int32_t>(), N, C);
    int32_t* correct = a.correct.as<int32_t>();
    correct[kTop1Hits] = static_cast<int32_t>(hits.top1);
    correct[kTop5Hits] = static_cast<int32_t>(hits.top5);
  });
}

void accumulate_totals(const OpCall& call, const AccumulateTotals<TensorArg>& a) {
  const std::string who = fmt::format("accumulate_totals '{}'", call.layer().name);
  loss::expect_totals(who, a.loss, a.correct, a.totals);
  double loss = 0;
  if (a.loss) loss = a.loss.dtype() == DType::F64 ? a.loss.as<double>()[0] : double(a.loss.as<float>()[0]);
  const int32_t* correct = a.correct.as<int32_t>();
  add_run_to_totals(a.totals.as<double>(), a.loss ? &loss : nullptr, correct[kTop1Hits], correct[kTop5Hits],
                    call.scalars.step);
}

}  // namespace

namespace ops {
extern const OpTable loss_cpu_ops{
    Device::CPU, {kernel<SoftmaxCrossEntropy, softmax_ce>(), kernel<CountCorrect, count_correct>(),
                 kernel<AccumulateTotals, accumulate_totals>()}};
}  // namespace ops

}  // namespace kiln
