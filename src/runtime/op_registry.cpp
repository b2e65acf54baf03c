#include <array>
#include <map>

#include "runtime/op_call.h"

namespace kiln {
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
  auto it = registry().find({device, kind});
  if (it == registry().end())
    fail("op {} has no {} implementation yet; train this model with --device cpu", op_kind_name(kind),
         device_name(device));
  return it->second;
}
}  // namespace

void register_op(Device device, OpKind kind, OpFn fn, PrepareFn prepare) {
  registry()[{device, kind}] = {fn, prepare};
}

OpFn find_op(Device device, OpKind kind) { return entry(device, kind).run; }
PrepareFn find_prepare(Device device, OpKind kind) { return entry(device, kind).prepare; }

std::string OpCall::where() const {
  return op.layer >= 0 ? fmt::format("{} '{}'", op_kind_name(op.kind), layer().name) : op_kind_name(op.kind);
}

}  // namespace kiln
