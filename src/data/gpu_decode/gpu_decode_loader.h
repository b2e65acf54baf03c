#pragma once
// Training batches whose JPEGs the GPU decodes (--decode gpu): nvJPEG's hardware backend (the
// H100/H200 JPEG engines) where the driver offers it, else its GPU-assisted one, batched; the
// crop, resize and flip as a CUDA kernel on the loader's own streams, into a device buffer the
// trainer normalizes into the model's input. The loader's CPU threads take what the GPU cannot
// decode (PNG, CMYK, progressive, grayscale files) and also share the work: they take samples from the
// back of each batch while the GPU takes them from the front, so the two meet wherever their
// speeds put the split.
//
// A sample's crop and flip come from (seed, epoch, index) as on the CPU path; its pixels differ
// from the CPU path's by the decoders' and resamplers' rounding, so a batch's bytes depend on which
// side decoded each sample (not on the worker count alone, as on the CPU path).
#include <memory>
#include <string>

#include "kiln/data.h"

namespace kiln {

struct GpuDecodeSettings {
  int batch = 256;
  bool shuffle = true, drop_last = true;
  uint64_t seed = 0;
  int workers = 2;   // CPU threads
  int device = 0;    // CUDA device
  int prefetch = 4;  // batches built ahead
  // The GPU takes work only in the next `gpu_lead` batches the consumer will ask for; the CPU
  // threads work up to `prefetch` ahead. 1 (--decode auto): the CPU threads decode what they can
  // and the GPU only finishes the batch the trainer is waiting for, so a GPU-bound model loses
  // nothing to decode kernels, and a loader-bound one gains. 2 (--decode gpu): the GPU decodes as
  // much as it can (the most crops/s, costing a GPU-bound model ~3%). docs/results.md has both.
  int gpu_lead = 2;
  LoaderShard shard;
};

// Whether this build has nvJPEG (the GPU decode path).
bool gpu_decode_built();

// kiln::Error when nvJPEG is not built in or no GPU answers, naming the fix (--decode cpu).
std::unique_ptr<BatchStream> make_gpu_decode_loader(const SampleSource& source, const GpuDecodeSettings& settings);

}  // namespace kiln
