#include "core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiln/error.h"

namespace kiln {

std::vector<uint8_t> read_file_bytes(const std::string& path, const std::string& hint) {
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  std::string suffix = hint.empty() ? "" : "; " + hint;
  if (!std::filesystem::exists(status)) fail("file '{}' does not exist{}", path, suffix);
  if (std::filesystem::is_directory(status)) fail("'{}' is a directory, expected a file{}", path, suffix);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '{}': {}{}", path, std::strerror(errno), suffix);
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size))
    fail("error while reading '{}' ({} bytes expected)", path, size);
  return bytes;
}

namespace {

// Owns the temporary file until it has been renamed into place; removes it otherwise.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  void open(const std::string& target) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      committed_ = true;  // nothing was created, nothing to remove
      fail("cannot write '{}': cannot create temporary file '{}': {} (does the directory exist "
           "and is it writable?)", target, path_, std::strerror(errno));
    }
  }
  void write(std::span<const std::byte> data, const std::string& target) {
    const std::byte* p = data.data();
    size_t left = data.size();
    while (left > 0) {
      ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("cannot write '{}': writing '{}' failed: {}", target, path_, std::strerror(errno));
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  void finish(const std::string& target) {
    if (::fsync(fd_) != 0) fail("cannot write '{}': fsync failed: {}", target, std::strerror(errno));
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot write '{}': close failed: {}", target, std::strerror(errno));
    if (::rename(path_.c_str(), target.c_str()) != 0)
      fail("cannot write '{}': renaming '{}' into place failed: {}", target, path_, std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Makes the rename itself durable; best effort, since some filesystems refuse to fsync a directory.
void sync_parent_dir(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::vector<std::span<const std::byte>>& chunks) {
  TempFile temp(path + ".tmp." + std::to_string(::getpid()));
  temp.open(path);
  for (const auto& chunk : chunks) temp.write(chunk, path);
  temp.finish(path);
  sync_parent_dir(path);
}

}  // namespace kiln
