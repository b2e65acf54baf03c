#pragma once
// BatchNorm in eval mode is an affine map per channel, y = (x - mean) * gamma / sqrt(var + eps) + beta,
// so after a convolution it folds into the convolution's weight and bias (OnnxExportOptions::fold_bn).
#include <string>
#include <vector>

#include "kiln/executable.h"

namespace kiln::export_layout {

struct BatchNormValues {
  std::vector<float> gamma, beta, mean, var;  // "<bn>.weight", ".bias", ".running_mean", ".running_var"
  double eps = 1e-5;
};

// The BatchNorm named `bn` (its tensors' prefix) of `exe`.
BatchNormValues read_batch_norm(Executable& exe, const std::string& bn, double eps);

// Folds `bn` into a convolution whose output channels lead `weight` (OIHW) and index `bias` (zeros
// for a convolution without one): weight[k] * s[k] and (bias[k] - mean[k]) * s[k] + beta[k], with
// s = gamma / sqrt(var + eps), computed in double and rounded once.
void fold_batch_norm(std::vector<float>& weight, std::vector<float>& bias, const BatchNormValues& bn);

}  // namespace kiln::export_layout
