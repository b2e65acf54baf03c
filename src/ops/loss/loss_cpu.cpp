#include "ops/loss/loss_cpu.h"

#include <cmath>
#include <vector>

#include "runtime/op_call.h"

namespace kiln::cpu {
namespace {
// Below this many logits a thread team costs more than it saves (exp dominates).
constexpr int64_t kParallelElems = 1 << 13;
}  // namespace

template <class T>
double softmax_cross_entropy(const T* logits, const int32_t* labels, int64_t N, int64_t C,
                             double label_smoothing, T* dlogits) {
  std::vector<double> row_loss(N);
  const double off_target = label_smoothing / static_cast<double>(C);
  const double on_target = 1.0 - label_smoothing + off_target;
  const double inv_n = 1.0 / static_cast<double>(N);
#pragma omp parallel for if (N * C > kParallelElems)
  for (int64_t n = 0; n < N; ++n) {
    const T* z = logits + n * C;
    double max = z[0];
    for (int64_t c = 1; c < C; ++c) max = std::max(max, static_cast<double>(z[c]));
    double sum_exp = 0.0, sum_shifted = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      double shifted = z[c] - max;
      sum_exp += std::exp(shifted);
      sum_shifted += shifted;
    }
    double log_sum = std::log(sum_exp);
    int64_t label = labels[n];
    // -sum_c target_c * (shifted_c - log_sum), with sum_c target_c = 1.
    double target_dot_shifted = (1.0 - label_smoothing) * (z[label] - max) + off_target * sum_shifted;
    row_loss[n] = log_sum - target_dot_shifted;
    if (dlogits) {
      T* d = dlogits + n * C;
      for (int64_t c = 0; c < C; ++c) {
        double p = std::exp(z[c] - max - log_sum);
        double target = c == label ? on_target : off_target;
        d[c] = static_cast<T>((p - target) * inv_n);
      }
    }
  }
  double total = 0.0;
  for (double l : row_loss) total += l;
  return total * inv_n;
}

int64_t find_bad_label(const int32_t* labels, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n)
    if (labels[n] < 0 || labels[n] >= C) return n;
  return -1;
}

template <class T>
int64_t count_correct(const T* logits, const int32_t* labels, int64_t N, int64_t C) {
  int64_t correct = 0;
  for (int64_t n = 0; n < N; ++n) {
    const T* z = logits + n * C;
    int64_t best = 0;
    for (int64_t c = 1; c < C; ++c)
      if (z[c] > z[best]) best = c;
    correct += labels[n] == best;
  }
  return correct;
}

#define KILN_INSTANTIATE_LOSS(T)                                                              \
  template double softmax_cross_entropy<T>(const T*, const int32_t*, int64_t, int64_t, double, \
                                           T*);                                               \
  template int64_t count_correct<T>(const T*, const int32_t*, int64_t, int64_t);
KILN_INSTANTIATE_LOSS(float)
KILN_INSTANTIATE_LOSS(double)
#undef KILN_INSTANTIATE_LOSS

}  // namespace kiln::cpu

namespace kiln {
namespace {

void softmax_ce_op(const OpCall& call) {
  const std::string& name = call.layer().name;
  if (call.in.size() < 2 || !call.in[0] || !call.in[1] || call.out.empty() || !call.out[0])
    fail("softmax_cross_entropy '{}': op needs logits, labels and a loss tensor; the program is "
         "malformed, recompile it",
         name);
  const TensorArg &logits = call.in[0], &labels = call.in[1], &loss = call.out[0];
  const Shape& s = logits.shape();
  if (s.size() != 2 || s[0] < 1 || s[1] < 1)
    fail("softmax_cross_entropy '{}': logits have shape {}, expected (N, classes); flatten and "
         "add a Linear layer before the loss",
         name, shape_str(s));
  const int64_t N = s[0], C = s[1];
  if (labels.dtype() != DType::I32 || labels.numel() != N)
    fail("softmax_cross_entropy '{}': labels are {} {} but {} I32 class indices are needed (one "
         "per logits row)",
         name, dtype_name(labels.dtype()), shape_str(labels.shape()), N);
  if (loss.numel() != 1 || loss.dtype() != logits.dtype())
    fail("softmax_cross_entropy '{}': loss tensor is {} {}, expected {} [1]", name,
         dtype_name(loss.dtype()), shape_str(loss.shape()), dtype_name(logits.dtype()));
  const TensorArg* dlogits = call.out.size() > 1 && call.out[1] ? &call.out[1] : nullptr;
  if (dlogits && (dlogits->numel() != N * C || dlogits->dtype() != logits.dtype()))
    fail("softmax_cross_entropy '{}': dlogits is {} {}, expected {} {}", name,
         dtype_name(dlogits->dtype()), shape_str(dlogits->shape()), dtype_name(logits.dtype()),
         shape_str(s));
  const double smoothing = call.program.options.label_smoothing;
  if (!(smoothing >= 0.0 && smoothing <= 1.0))
    fail("softmax_cross_entropy '{}': label_smoothing {} is outside [0, 1]; use e.g. 0.1", name,
         smoothing);
  const int32_t* label_data = labels.as<int32_t>();
  if (int64_t bad = cpu::find_bad_label(label_data, N, C); bad >= 0)
    fail("softmax_cross_entropy '{}': label {} at batch index {} is outside [0, {}); the dataset "
         "has more classes than the model's {} outputs, or the labels are corrupt",
         name, label_data[bad], bad, C, C);
  dispatch_float(logits.dtype(), "SOFTMAX_CE", [&](auto t) {
    using T = decltype(t);
    double value = cpu::softmax_cross_entropy<T>(logits.as<T>(), label_data, N, C, smoothing,
                                                 dlogits ? dlogits->as<T>() : nullptr);
    loss.as<T>()[0] = static_cast<T>(value);
  });
}

}  // namespace

void register_loss_cpu() { register_op(Device::CPU, OpKind::SOFTMAX_CE, softmax_ce_op); }

}  // namespace kiln
