#include "cli/version.h"

#include <fmt/format.h>

#ifdef KILN_WITH_CUDA
#include <cudnn.h>
#endif

// Set for kiln_cli by CMakeLists.txt; these defaults only serve a build outside it.
#ifndef KILN_VERSION
#define KILN_VERSION "unknown"
#endif
#ifndef KILN_GIT_COMMIT
#define KILN_GIT_COMMIT "unknown"
#endif

namespace kiln::cli {

std::string version_text() {
#ifdef KILN_WITH_CUDA
  // The cuDNN loaded at run time, which may differ from the headers': 9.x encodes as
  // major * 10000 + minor * 100 + patch, 8.x as major * 1000 + minor * 100 + patch.
  const size_t v = cudnnGetVersion();
  const std::string cudnn = v >= 90000 ? fmt::format("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100)
                                       : fmt::format("{}.{}.{}", v / 1000, v % 1000 / 100, v % 100);
  const std::string cuda = fmt::format("yes (cuDNN {})", cudnn);
#else
  const std::string cuda = "no";
#endif
  return fmt::format("kiln {} (commit {}), CUDA backend: {}", KILN_VERSION, KILN_GIT_COMMIT, cuda);
}

}  // namespace kiln::cli
