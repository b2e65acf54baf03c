#pragma once
// A batch's pixels that the GPU decoded, as the loader (kiln/data.h) hands them to the runtime
// (Executable::write_device_pixels_ordered): a low-level type of its own, so that the runtime
// needs nothing of the data layer.
#include <cstdint>

namespace kiln {

// A batch's uint8 pixels already on the GPU (decoded there). The consumer orders its reads after
// ready_event() and then calls read_on(stream) with the stream that reads them: the loader
// reuses the buffer only after those reads.
class DevicePixels {
 public:
  virtual ~DevicePixels() = default;
  virtual const uint8_t* data() const = 0;  // device memory, batch * H * W * C bytes, NHWC
  virtual void* ready_event() const = 0;    // a cudaEvent_t
  virtual void read_on(void* stream) = 0;   // a cudaStream_t; nullptr: read (or dropped) already
  virtual void wait_ready() = 0;            // blocks the host until the pixels are there
};

}  // namespace kiln
