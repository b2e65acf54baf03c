#include "export/output_path.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "kiln/error.h"

namespace kiln::export_layout {

void check_output_path(const std::string& path, bool overwrite, const char* what, const char* overwrite_flag) {
  namespace fs = std::filesystem;
  if (path.empty()) fail("the {} path is empty; name a file to write", what);
  const fs::path file(path);
  std::error_code ec;
  if (fs::is_directory(file, ec)) fail("the {} path '{}' is a folder; name a file inside it", what, path);
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    fail("the folder '{}' of the {} '{}' does not exist; create it (mkdir -p '{}') or choose another path",
         dir.string(), what, path, dir.string());
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail("the folder '{}' of the {} '{}' is not writable ({}); choose another path", dir.string(), what, path,
         std::strerror(errno));
  if (fs::exists(file, ec) && !overwrite)
    fail("'{}' already exists; replace it with {} or choose another path. It is left as it was", path, overwrite_flag);
  if (fs::exists(file, ec) && !fs::is_regular_file(file, ec))
    fail("'{}' exists and is not a regular file; choose another path for the {}", path, what);
}

}  // namespace kiln::export_layout
