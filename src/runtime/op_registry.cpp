#include <map>
#include <mutex>

#include "runtime/op_call.h"

namespace kiln {

// The tables the build collected (cmake/op_tables.cmake writes the function that lists them).
const std::vector<const OpTable*>& cpu_op_tables();

namespace {
struct Entry {
  OpFn run;
  PrepareFn prepare;
};
std::map<std::pair<Device, OpKind>, Entry>& registry() {
  static std::map<std::pair<Device, OpKind>, Entry> table;
  return table;
}
const Entry& entry(Device device, OpKind kind) {
  if (device == Device::CPU) register_cpu_ops();
  auto it = registry().find({device, kind});
  if (it == registry().end())
    fail("op {} has no {} implementation; run this model on {}", op_kind_name(kind), device_name(device),
         device == Device::CPU ? "the GPU (--device cuda)" : "the CPU (--device cpu)");
  return it->second;
}
}  // namespace

void register_table(const OpTable& table) {
  for (const OpKernel& k : table.kernels) {
    auto [it, added] = registry().insert({{table.device, k.kind}, {k.run, k.prepare}});
    if (!added) fail("internal: two {} kernels registered for op {}", device_name(table.device), op_kind_name(k.kind));
  }
}

void register_cpu_ops() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const OpTable* t : cpu_op_tables()) register_table(*t);
  });
}

OpFn find_op(Device device, OpKind kind) { return entry(device, kind).run; }
PrepareFn find_prepare(Device device, OpKind kind) { return entry(device, kind).prepare; }

std::string OpCall::where() const {
  return op.layer >= 0 ? fmt::format("{} '{}'", op_kind_name(op.kind), layer().name) : op_kind_name(op.kind);
}

}  // namespace kiln
