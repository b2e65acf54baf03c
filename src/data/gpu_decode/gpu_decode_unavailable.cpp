// Builds without nvJPEG (no CUDA toolkit, or its nvJPEG library was not found): --decode gpu is
// refused with the fix.
#include "data/gpu_decode/gpu_decode_loader.h"
#include "kiln/error.h"

namespace kiln {

bool gpu_decode_built() { return false; }

std::unique_ptr<BatchStream> make_gpu_decode_loader(const SampleSource&, const GpuDecodeSettings&) {
  fail("this kiln build has no GPU JPEG decoder (nvJPEG was not found when it was built); use --decode cpu, or "
       "rebuild on a machine with CUDA (scripts/setup.sh fetches nvJPEG)");
}

}  // namespace kiln
