#pragma once
// The pool family's tests: one forward, backward and inference of a program whose output is the
// pooling layer (batch 2, no loss, the input's gradient kept), in T (float or double), inputs drawn
// in float64 and rounded to T so that a reference reads the values the program does.
#include <cstdint>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "support/cpu_test_util.h"

namespace kiln::pool_test {

struct ProgramRun {
  Shape y_shape;
  testing::Vec x, dy, y, dx, y_inference;
};

template <class T>
testing::Vec as_double(const std::vector<T>& v) {
  return testing::Vec(v.begin(), v.end());
}

template <class T>
ProgramRun run(const Blueprint& model, uint32_t seed) {
  CompileOptions o;
  o.precision = sizeof(T) == 8 ? Precision::FP64 : Precision::FP32;
  o.batch = 2, o.loss = false, o.input_grad = true;
  Executable exe(compile(model, o), 1);
  const Program& p = exe.program();
  ProgramRun r;
  r.y_shape = p.tensors[p.logits].shape;
  std::vector<T> x, dy;
  for (double v : testing::uniform_vec(seed, size_t(numel(p.tensors[p.input].shape)), -2, 2)) x.push_back(T(v));
  for (double v : testing::uniform_vec(seed + 1, size_t(numel(r.y_shape)), -2, 2)) dy.push_back(T(v));
  r.x = as_double(x), r.dy = as_double(dy);
  exe.write(p.input, x.data(), x.size() * sizeof(T));
  exe.write(p.output_grad, dy.data(), dy.size() * sizeof(T));
  const StepScalars s{0.f, 0, 1};
  exe.run_forward(s);
  r.y = as_double(exe.read<T>(p.logits));
  exe.run_backward(s);
  r.dx = as_double(exe.read<T>(p.input_grad));
  exe.run_inference(s);
  r.y_inference = as_double(exe.read<T>(p.inference_logits));
  return r;
}

}  // namespace kiln::pool_test
