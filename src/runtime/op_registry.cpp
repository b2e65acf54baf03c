#include <array>
#include <map>

#include "runtime/op_call.h"

namespace kiln {
namespace {
std::map<std::pair<Device, OpKind>, OpFn>& registry() {
  static std::map<std::pair<Device, OpKind>, OpFn> table;
  return table;
}
}  // namespace

void register_op(Device device, OpKind kind, OpFn fn) { registry()[{device, kind}] = fn; }

OpFn find_op(Device device, OpKind kind) {
  auto it = registry().find({device, kind});
  if (it == registry().end())
    fail("op {} has no {} implementation", op_kind_name(kind), device_name(device));
  return it->second;
}

}  // namespace kiln
