#include "kiln/device.h"

namespace kiln {

DeviceSpec resolve_device(const std::string& text) {
  if (text != "auto") return parse_device_spec(text);
  return cuda_device_count() > 0 ? DeviceSpec{Device::CUDA, 0} : DeviceSpec{Device::CPU, 0};
}

}  // namespace kiln
