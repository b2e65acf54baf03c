#include "data/gpu_decode/crop_resize_cuda.h"

namespace kiln {
namespace {

// PIL's window and weights for output index i along one axis of a box [0, len) resampled to out.
struct Window {
  int first = 0, taps = 0;
  float center = 0, inv_scale = 1, norm = 1;
};

__device__ Window window_of(int i, int len, int out) {
  const float scale = float(len) / float(out);
  const float filterscale = fmaxf(scale, 1.0f);
  const float support = filterscale;
  Window w;
  w.center = (float(i) + 0.5f) * scale;
  w.first = max(int(w.center - support + 0.5f), 0);
  const int last = min(int(w.center + support + 0.5f), len);
  w.taps = max(last - w.first, 1);
  w.inv_scale = 1.0f / filterscale;
  float sum = 0;
  for (int k = 0; k < w.taps; ++k) sum += fmaxf(0.f, 1.f - fabsf((float(w.first + k) - w.center + 0.5f) * w.inv_scale));
  w.norm = sum > 0 ? 1.0f / sum : 0.f;
  return w;
}

__device__ float weight_at(const Window& w, int k) {
  return fmaxf(0.f, 1.f - fabsf((float(w.first + k) - w.center + 0.5f) * w.inv_scale)) * w.norm;
}

// Block: one output row of one job; threads stride over the row's pixels.
__global__ void crop_resize_kernel(const CropJob* __restrict__ jobs, int out) {
  const CropJob job = jobs[blockIdx.y];
  const int oy = blockIdx.x;
  const Window wy = window_of(oy, job.height, out);
  for (int ox = threadIdx.x; ox < out; ox += blockDim.x) {
    const Window wx = window_of(ox, job.width, out);
    float acc[3] = {0.f, 0.f, 0.f};
    for (int ky = 0; ky < wy.taps; ++ky) {
      const float fy = weight_at(wy, ky);
      if (fy == 0.f) continue;
      const uint8_t* row = job.src + int64_t(job.y + wy.first + ky) * job.pitch + int64_t(job.x + wx.first) * 3;
      float racc[3] = {0.f, 0.f, 0.f};
      for (int kx = 0; kx < wx.taps; ++kx) {
        const float fx = weight_at(wx, kx);
        racc[0] += fx * row[kx * 3 + 0];
        racc[1] += fx * row[kx * 3 + 1];
        racc[2] += fx * row[kx * 3 + 2];
      }
      for (int c = 0; c < 3; ++c) acc[c] += fy * racc[c];
    }
    const int dx = job.flip ? out - 1 - ox : ox;
    uint8_t* o = job.dst + (int64_t(oy) * out + dx) * 3;
    for (int c = 0; c < 3; ++c) o[c] = uint8_t(fminf(fmaxf(floorf(acc[c] + 0.5f), 0.f), 255.f));
  }
}

}  // namespace

void launch_crop_resize(const CropJob* jobs, int count, int out, cudaStream_t stream) {
  if (count <= 0) return;
  crop_resize_kernel<<<dim3(unsigned(out), unsigned(count)), 128, 0, stream>>>(jobs, out);
}

}  // namespace kiln
