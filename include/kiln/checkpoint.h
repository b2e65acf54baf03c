#pragma once
// Checkpoints: kiln train writes them as safetensors files (kiln/safetensors.h, the format and its
// checksums); here, where one may be written and the lock that keeps a second writer out.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/safetensors.h"

namespace kiln {

// kiln's version, recorded in the checkpoints the trainer writes ("kiln_version").
inline constexpr const char* kVersion = "0.1.0";

// Checks, before anything is trained, that a checkpoint can be written at `path`: its folder
// exists and is writable, and `path` itself is not a folder. Throws kiln::Error naming the
// path and the fix otherwise.
void check_checkpoint_path(const std::string& path);

// Removes the "<checkpoint>.tmp.<pid>" files (save_safetensors' temporaries) whose pid no longer
// runs (kill(pid, 0) fails with ESRCH): left by a writer killed mid-write, each as large as the
// checkpoint. Those of running processes, and other files, are left alone. Returns the paths
// removed; prints nothing. A folder that cannot be listed removes nothing.
std::vector<std::string> remove_stale_temp_files(const std::string& checkpoint);

// Makes a second writer of the same checkpoint fail at once. Holds "<checkpoint>.lock", created
// with O_CREAT|O_EXCL and holding the writer's pid, plus an flock(2) on it for as long as the
// lock lives; the destructor removes the file. A lock file nobody holds any more (its writer was
// killed or crashed, so its pid no longer runs) is taken over. On file systems without flock the
// pid alone decides: a lock whose pid still runs is held. Checks the path first
// (check_checkpoint_path). Throws kiln::Error naming the checkpoint, the lock file and the pid
// of the writer holding it. Once held, it removes the temporaries of interrupted writes of the
// checkpoint (remove_stale_temp_files), silently: removed_temp_files() lists them.
class CheckpointLock {
 public:
  explicit CheckpointLock(const std::string& checkpoint);
  ~CheckpointLock();
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;

  const std::string& path() const { return path_; }  // "<checkpoint>.lock"
  bool took_over() const { return took_over_; }      // a stale lock file was taken over
  const std::vector<std::string>& removed_temp_files() const { return removed_temp_files_; }

 private:
  std::string path_;
  std::vector<std::string> removed_temp_files_;
  int fd_ = -1;
  uint64_t device_ = 0, inode_ = 0;
  bool took_over_ = false;
};

}  // namespace kiln
