#include "formats/tensorboard/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "kiln/error.h"

namespace kiln {
namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

void TensorBoardWriter::check_folder(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    fail("--tensorboard '{}' is a file, not a folder; give a folder for the event files (it is made when missing)",
         dir);
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  namespace fs = std::filesystem;
  check_folder(dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot make the TensorBoard folder '{}': {}; give another --tensorboard folder", dir, ec.message());
  const double now = wall_seconds();
  const std::string base =
      (fs::path(dir) / fmt::format("events.out.tfevents.{:010d}.{}", int64_t(now), host_name())).string();
  for (int n = 0; fd_ < 0; ++n) {
    path_ = n == 0 ? base : fmt::format("{}.{}", base, n);
    // O_EXCL: a name taken (another run in the same second) is skipped, never truncated.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && (errno != EEXIST || n >= 1000))
      fail("cannot create the TensorBoard event file '{}': {}; give another --tensorboard folder", path_,
           std::strerror(errno));
  }
  write_record(file_version_event(now));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<TensorBoardScalar>& values) {
  write_record(scalars_event(wall_seconds(), step, values));
}

void TensorBoardWriter::write_record(const std::string& event) {
  const std::string record = tfrecord(event);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write the TensorBoard event file '{}': {}", path_, std::strerror(errno));
    done += size_t(n);
  }
}

}  // namespace kiln
