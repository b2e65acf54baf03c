// Where a checkpoint may be written and who writes it: the path checks, the lock file beside the
// checkpoint ("<checkpoint>.lock", flock + the holder's pid) and the removal of temporary files
// that dead writers left. The file format itself is checkpoint.cpp.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/checkpoint.h"
#include "kiln/error.h"

namespace kiln {

void check_checkpoint_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) fail("the checkpoint path is empty; name a file, e.g. runs/run.safetensors");
  const fs::path file(path);
  std::error_code ec;
  if (fs::is_directory(file, ec))
    fail("checkpoint '{}' is a folder; name a file inside it, e.g. '{}'", path, (file / "run.safetensors").string());
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  const fs::file_status status = fs::status(dir, ec);
  if (!fs::exists(status))
    fail("the folder '{}' of checkpoint '{}' does not exist; create it (mkdir -p '{}') or choose another "
         "checkpoint path", dir.string(), path, dir.string());
  if (!fs::is_directory(status))
    fail("'{}' in checkpoint path '{}' is not a folder; choose another checkpoint path", dir.string(), path);
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail("the folder '{}' of checkpoint '{}' is not writable ({}); choose a writable folder or change its "
         "permissions", dir.string(), path, std::strerror(errno));
  if (fs::exists(file, ec) && !fs::is_regular_file(file, ec))
    fail("checkpoint '{}' exists and is not a regular file; choose another checkpoint path", path);
}

namespace {

// The pid written in a lock file ("" when it holds none yet).
std::string lock_holder(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return "";
  std::string s(text, size_t(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

bool pid_runs(const std::string& pid_text) {
  long pid = 0;
  try {
    size_t used = 0;
    pid = std::stol(pid_text, &used);
    if (used != pid_text.size()) return false;
  } catch (const std::logic_error&) {
    return false;
  }
  return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM);
}

[[noreturn]] void fail_held(const std::string& checkpoint, const std::string& lock, const std::string& pid) {
  const std::string who = pid.empty() ? "another process"
                          : pid == std::to_string(::getpid()) ? fmt::format("this process (pid {})", pid)
                                                               : fmt::format("process {}", pid);
  fail("checkpoint '{}' is being written by another run: its lock file '{}' is held by {}. Wait for that run to "
       "finish, or give this run another checkpoint path", checkpoint, lock, who);
}

}  // namespace

std::vector<std::string> remove_stale_temp_files(const std::string& checkpoint) {
  namespace fs = std::filesystem;
  const fs::path file(checkpoint);
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  const std::string prefix = file.filename().string() + ".tmp.";  // as write_file_atomic names them
  std::vector<std::string> removed;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return removed;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string pid_text = name.substr(prefix.size());
    long pid = 0;
    const auto [end, parsed] = std::from_chars(pid_text.data(), pid_text.data() + pid_text.size(), pid);
    if (parsed != std::errc() || end != pid_text.data() + pid_text.size() || pid <= 0 || pid_text[0] == '0')
      continue;
    std::error_code type_error;
    if (!it->is_regular_file(type_error) || it->is_symlink(type_error)) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // runs (or cannot tell): may be writing it
    const std::string path = (dir / name).string();
    if (::unlink(path.c_str()) == 0) removed.push_back(path);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

CheckpointLock::CheckpointLock(const std::string& checkpoint) : path_(checkpoint + ".lock") {
  check_checkpoint_path(checkpoint);
  // A holder that ends unlinks the file before releasing it, so a lock won on a file that is no
  // longer at path_ is worthless: try again (a few times; each retry means another run moved).
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    const bool created = fd >= 0;
    if (!created) {
      if (errno != EEXIST)
        fail("cannot create the lock file '{}' of checkpoint '{}': {}; the checkpoint's folder must be writable",
             path_, checkpoint, std::strerror(errno));
      fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0) {
        if (errno == ENOENT) continue;  // its holder just removed it
        fail("cannot open the lock file '{}' of checkpoint '{}': {}", path_, checkpoint, std::strerror(errno));
      }
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        const std::string pid = lock_holder(fd);
        ::close(fd);
        fail_held(checkpoint, path_, pid);
      }
      // No flock here (some network file systems): the pid alone says whether the lock is held.
      if (!created) {
        const std::string pid = lock_holder(fd);
        if (pid.empty() || pid_runs(pid)) {
          ::close(fd);
          fail_held(checkpoint, path_, pid);
        }
      }
    }
    struct stat held, now;
    if (::fstat(fd, &held) != 0 || ::stat(path_.c_str(), &now) != 0 || held.st_dev != now.st_dev ||
        held.st_ino != now.st_ino) {
      ::close(fd);
      continue;
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
      const int err = errno;
      ::unlink(path_.c_str());
      ::close(fd);
      fail("cannot write the lock file '{}' of checkpoint '{}': {}", path_, checkpoint, std::strerror(err));
    }
    fd_ = fd, device_ = uint64_t(held.st_dev), inode_ = uint64_t(held.st_ino), took_over_ = !created;
    // No other kiln writes this checkpoint now: a temporary of a writer that no longer runs is waste.
    removed_temp_files_ = remove_stale_temp_files(checkpoint);
    return;
  }
  fail("could not take the lock file '{}' of checkpoint '{}': other runs keep creating and removing it; give this "
       "run another checkpoint path", path_, checkpoint);
}

CheckpointLock::~CheckpointLock() {
  if (fd_ < 0) return;
  // Remove the file only while it is still ours (it may have been deleted by hand and re-made).
  struct stat now;
  if (::stat(path_.c_str(), &now) == 0 && uint64_t(now.st_dev) == device_ && uint64_t(now.st_ino) == inode_)
    ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace kiln
