#pragma once
// `kiln --version`.
#include <string>

namespace kiln::cli {

// "kiln <version> (commit <short hash>), CUDA backend: yes (cuDNN <x.y.z>)" or "..., CUDA backend:
// no". The version is the project's (CMakeLists.txt), the commit the one CMake was configured at
// ("unknown" without git or .git).
std::string version_text();

}  // namespace kiln::cli
