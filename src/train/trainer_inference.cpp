// The Trainer's eval-mode passes that look at every row's logits: Trainer::infer, and the report
// `kiln eval` prints (evaluate_in_detail). evaluate_accuracy (trainer.cpp) counts hits on the
// device instead and reads two numbers per pass.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/error.h"
#include "kiln/trainer.h"
#include "core/half_bits.h"
#include "ops/loss/loss_cpu.h"
#include "ops/loss/totals_slots.h"

namespace kiln {
namespace {

// The first `count` values of a logits tensor read back as bytes, widened exactly to double (every
// F32, F16 and BF16 value is a double, so ranks and ties stay those the device counted).
std::vector<double> widen(const std::vector<std::byte>& bytes, DType dtype, int64_t count) {
  std::vector<double> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const std::byte* p = bytes.data() + size_t(i) * dtype_size(dtype);
    switch (dtype) {
      case DType::F32: {
        float f;
        std::memcpy(&f, p, sizeof f);
        out[i] = f;
        break;
      }
      case DType::F64: std::memcpy(&out[i], p, sizeof(double)); break;
      case DType::F16:
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, p, sizeof h);
        out[i] = dtype == DType::F16 ? half_bits_to_double(h) : bf16_bits_to_double(h);
        break;
      }
      default: fail("the inference logits are {}, not a floating-point dtype", dtype_name(dtype));
    }
  }
  return out;
}

// -log softmax(z)[label], with the row's largest logit taken out first so that exp cannot overflow.
double cross_entropy(const double* z, int64_t classes, int64_t label) {
  double top = z[0];
  for (int64_t c = 1; c < classes; ++c) top = std::max(top, z[c]);
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(z[c] - top);
  return std::log(sum) + top - z[label];
}

}  // namespace

void Trainer::set_inference_inputs(ChannelStats normalization, std::vector<std::string> class_names) {
  const int64_t channels = exe_->program().tensors[exe_->program().input].shape[3];
  if (int64_t(normalization.mean.size()) != channels || int64_t(normalization.std.size()) != channels)
    fail("Trainer::set_inference_inputs: a normalization of {} means and {} standard deviations for a model of {} "
         "input channels; give one of each per channel", normalization.mean.size(), normalization.std.size(),
         channels);
  norm_ = std::move(normalization);
  class_names_ = std::move(class_names);
}

void Trainer::infer(const SampleSource& data, const LogitsBatch& on_batch) {
  check_dataset(data, "evaluation");
  const Program& p = exe_->program();
  const TensorSpec& logits = p.tensors[p.inference_logits];
  const int64_t batch = p.tensors[p.input].shape[0], classes = logits.shape[1];
  BatchLoader loader(data, int(batch), false, false, norm_.mean, norm_.std, opt_.seed, opt_.workers);
  loader.deliver_pixels(pixels_to_device());
  loader.start_epoch(0);
  Batch b;
  std::vector<std::vector<std::byte>> read(1);
  int64_t first = 0;
  while (loader.next(b)) {
    for (int64_t i = b.size; i < int64_t(b.labels.size()); ++i) b.labels[i] = -1;  // padding never counts
    copy_in(b);
    exe_->run_inference({0.f, global_step_, opt_.seed});
    exe_->read_many({p.inference_logits}, read);
    const std::vector<double> rows = widen(read[0], logits.dtype, b.size * classes);
    on_batch(first, b.size, rows.data(), b.labels.data());
    first += b.size;
  }
}

Trainer::Evaluation Trainer::evaluate_in_detail(const SampleSource& data) {
  const Program& p = exe_->program();
  const int64_t classes = p.tensors[p.inference_logits].shape[1];
  Evaluation e;
  e.class_correct.assign(size_t(classes), 0);
  e.class_count.assign(size_t(classes), 0);
  double loss_sum = 0;
  int64_t top1 = 0, top5 = 0;
  infer(data, [&](int64_t first, int64_t rows, const double* logits, const int32_t* labels) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t label = labels[r];
      if (label < 0 || label >= classes)
        fail("sample '{}' has label {}, outside the model's {} classes", data.sample_name(first + r), label, classes);
      const double* z = logits + r * classes;
      const int64_t rank = cpu::label_rank(z, classes, label);
      loss_sum += cross_entropy(z, classes, label);
      top1 += rank < 1, top5 += rank < kTopK;
      e.class_correct[size_t(label)] += rank < 1;
      ++e.class_count[size_t(label)];
    }
    e.images += rows;
  });
  const double n = double(std::max<int64_t>(e.images, 1));
  e.loss = loss_sum / n, e.top1 = double(top1) / n, e.top5 = double(top5) / n;
  return e;
}

}  // namespace kiln
