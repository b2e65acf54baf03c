#pragma once
// Training crops of GPU-decoded images: each job resamples a box of a decoded RGB image to an
// out x out sample with PIL's bilinear filter (the weights of data/image/resize.h: a triangle
// widened by the downscale factor, window clipped to the box, as torchvision crops before it
// resizes), mirrored when asked, written as uint8 HWC into the batch.
//
// One pass in float over both axes, where PIL makes two 8-bit passes in fixed point: a sample
// differs from the CPU path's by rounding (tests/gpu/gpu_decode_test.cpp states the bound).
#include <cuda_runtime.h>

#include <cstdint>

namespace kiln {

struct CropJob {
  const uint8_t* src = nullptr;  // decoded image, RGB interleaved, rows `pitch` bytes apart
  int64_t pitch = 0;
  int x = 0, y = 0, width = 0, height = 0;  // the box (inside the image)
  int flip = 0;
  uint8_t* dst = nullptr;  // out * out * 3 bytes
};

// Runs `count` jobs from `jobs` (device memory) on `stream`; every sample is out x out.
void launch_crop_resize(const CropJob* jobs, int count, int out, cudaStream_t stream);

}  // namespace kiln
