#include "data/image_folder/file_records.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kiln/error.h"

namespace kiln {

// POSIX reads: one open, one fstat, reads until the file's size, no stream buffering to copy
// through (these run on every decode thread at thousands of files a second).
void FileRecords::read(int64_t i, std::vector<uint8_t>& bytes) const {
  const std::string& path = index_.files[i];
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail("cannot open image '{}': {}; check that it exists and is readable, or remove it", path,
         std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot read image '{}': {}", path, std::strerror(err));
  }
  bytes.resize(size_t(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int err = got < 0 ? errno : 0;
      ::close(fd);
      fail("cannot read image '{}': {}; check the file and the disk", path,
           got < 0 ? std::strerror(err) : "it shrank while being read");
    }
    done += size_t(got);
  }
  ::close(fd);
}

}  // namespace kiln
