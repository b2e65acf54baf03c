#include "export/batch_norm_fold.h"

#include <cmath>

#include "export/weight_layouts.h"
#include "kiln/error.h"

namespace kiln::export_layout {

BatchNormValues read_batch_norm(Executable& exe, const std::string& bn, double eps) {
  BatchNormValues v;
  v.gamma = read_floats(exe, bn + ".weight");
  v.beta = read_floats(exe, bn + ".bias");
  v.mean = read_floats(exe, bn + ".running_mean");
  v.var = read_floats(exe, bn + ".running_var");
  v.eps = eps;
  return v;
}

void fold_batch_norm(std::vector<float>& weight, std::vector<float>& bias, const BatchNormValues& bn) {
  const size_t channels = bias.size();
  if (channels == 0 || weight.size() % channels != 0 || bn.gamma.size() != channels || bn.beta.size() != channels ||
      bn.mean.size() != channels || bn.var.size() != channels)
    fail("internal: a BatchNorm of {} channels does not fit a convolution of {} output channels", bn.gamma.size(),
         channels);
  const size_t per_channel = weight.size() / channels;
  for (size_t k = 0; k < channels; ++k) {
    const double scale = double(bn.gamma[k]) / std::sqrt(double(bn.var[k]) + bn.eps);
    for (size_t i = 0; i < per_channel; ++i) {
      float& w = weight[k * per_channel + i];
      w = float(double(w) * scale);
    }
    bias[k] = float((double(bias[k]) - double(bn.mean[k])) * scale + double(bn.beta[k]));
  }
}

}  // namespace kiln::export_layout
