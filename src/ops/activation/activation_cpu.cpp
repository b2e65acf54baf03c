#include "ops/activation/activation_cpu.h"

#include "ops/activation/activation_functions.h"

#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "core/parallel.h"
#include "kiln/error.h"

namespace kiln {

const char* activation_name(Activation a) {
  if (size_t(a) >= std::size(activation::kAll)) return "?";
  return activation::info(a).name;
}

Activation parse_activation(const std::string& name) {
  std::vector<std::string> names;
  for (const activation::Info& i : activation::kAll) {
    if (name == i.name) return i.kind;
    names.push_back(i.name);
  }
  fail("unknown activation '{}'; the activations are {} (relu is a layer of its own: Blueprint::relu)", name,
       fmt::join(names, ", "));
}

namespace cpu {

namespace {
// Elements per task (the functions cost a few to a few tens of flops each).
constexpr int64_t kTaskElems = 1 << 14;
}  // namespace

// Elementwise and independent, so any split over threads gives the same bytes.
template <class T>
void activation_forward(Activation f, float alpha, const T* x, int64_t n, T* y) {
  activation::visit(f, [&](auto fn) {
    using F = decltype(fn);
    parallel_blocks(n, kTaskElems, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) y[i] = F::value(x[i], T(alpha));
    });
  });
}

template <class T>
void activation_backward(Activation f, float alpha, const T* dy, const T* x, int64_t n, T* dx) {
  activation::visit(f, [&](auto fn) {
    using F = decltype(fn);
    parallel_blocks(n, kTaskElems, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) dx[i] = dy[i] * F::derivative(x[i], T(alpha));
    });
  });
}

template void activation_forward<float>(Activation, float, const float*, int64_t, float*);
template void activation_forward<double>(Activation, float, const double*, int64_t, double*);
template void activation_backward<float>(Activation, float, const float*, const float*, int64_t, float*);
template void activation_backward<double>(Activation, float, const double*, const double*, int64_t, double*);

}  // namespace cpu
}  // namespace kiln
