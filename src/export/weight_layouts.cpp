#include "export/weight_layouts.h"

#include <cmath>

#include "kiln/error.h"

namespace kiln::export_layout {

namespace {

std::vector<float> read_as_float(Executable& exe, int id, const std::string& name) {
  const TensorSpec& t = exe.program().tensors[id];
  if (t.dtype == DType::F32) return exe.read<float>(id);
  if (t.dtype == DType::F64) {
    const std::vector<double> wide = exe.read<double>(id);
    return std::vector<float>(wide.begin(), wide.end());
  }
  fail("tensor '{}' is {}; only float32 and float64 tensors are exported", name, dtype_name(t.dtype));
}

}  // namespace

std::vector<float> read_floats(Executable& exe, const std::string& name) {
  std::vector<float> values = read_as_float(exe, exe.id(name), name);
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]) && bad++ == 0) first = int64_t(i);
  if (bad > 0)
    fail("tensor '{}' holds {} non-finite value{} (the first, {}, at index {}): the model has diverged, and a file "
         "of it would compute nothing useful; nothing was written. Export an earlier checkpoint",
         name, bad, bad == 1 ? "" : "s", values[size_t(first)], first);
  return values;
}

}  // namespace kiln::export_layout
