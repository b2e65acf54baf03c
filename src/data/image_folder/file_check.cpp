#include "data/image_folder/file_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/parallel.h"
#include "data/image/image_codec.h"
#include "kiln/error.h"

namespace kiln {
namespace {

// Closes the file however the check ends.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// `size` bytes at `offset`, read fully (a short read is a file that shrank meanwhile).
void read_at(int fd, uint8_t* out, size_t size, size_t offset, const std::string& path) {
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, out + done, size - done, off_t(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      fail("cannot read image '{}': {}; check the file and the disk", path,
           got < 0 ? std::strerror(errno) : "it shrank while being read");
    done += size_t(got);
  }
}

// Why `path` cannot be opened, in the user's terms: a dangling link is the usual case in a
// folder of links.
[[noreturn]] void fail_open(const std::string& path, int err) {
  struct stat own {};
  if (::lstat(path.c_str(), &own) == 0 && S_ISLNK(own.st_mode)) {
    std::string target(4096, '\0');
    const ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
    target.resize(n < 0 ? 0 : size_t(n));
    if (err == ELOOP)
      fail("image '{}' is a link to '{}' that leads back to itself; remove the link", path, target);
    fail("image '{}' is a link to '{}', which {}; remove the link or restore what it points to", path, target,
         err == ENOENT ? "does not exist" : std::strerror(err));
  }
  fail("cannot open image '{}': {}; check that it exists and is readable, or remove it", path, std::strerror(err));
}

// Where a JPEG's first scan's entropy-coded data starts (right after its SOS header, where
// libjpeg's jpeg_read_header stops), following the marker segments from SOI; 2 (just after SOI)
// when the bytes do not reach it or are not laid out as expected, which only makes the EOI search
// wider.
size_t jpeg_scan_start(const uint8_t* b, size_t n) {
  size_t p = 2;
  while (p + 4 <= n) {
    if (b[p] != 0xff) return 2;
    while (p < n && b[p] == 0xff) ++p;  // fill bytes
    if (p + 3 > n) return 2;
    const uint8_t marker = b[p++];
    if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) continue;  // TEM, RSTn: no length
    const size_t length = size_t(b[p]) << 8 | b[p + 1];
    if (length < 2 || marker == 0xd8 || marker == 0xd9) return 2;
    if (marker == 0xda) return p + length <= n ? p + length : 2;
    p += length;
  }
  return 2;
}

// Whether the bytes [from, from + size) hold a JPEG EOI marker (FF D9). Entropy-coded data never
// holds one (a data byte FF is followed by 00, a restart marker by D0..D7).
bool holds_eoi(const uint8_t* b, size_t size) {
  for (size_t i = 1; i < size; ++i)
    if (b[i] == 0xd9 && b[i - 1] == 0xff) return true;
  return false;
}

// Whether the bytes hold a PNG IEND chunk (length 0, type IEND, its CRC).
bool holds_iend(const uint8_t* b, size_t size) {
  static constexpr uint8_t kIend[] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
  return std::search(b, b + size, std::begin(kIend), std::end(kIend)) != b + size;
}

ImageFileCheck check(const std::string& path, std::vector<uint8_t>& bytes) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // no wait on a FIFO named *.jpg
  if (f.fd < 0) fail_open(path, errno);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail("cannot read image '{}': {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("image '{}' is not a regular file; remove it", path);
  const size_t size = size_t(st.st_size);
  // The head, and the tail right after it (so one buffer holds both): the whole file when small.
  const bool whole = size <= kHeadBytes + kTailBytes;
  const size_t head = whole ? size : kHeadBytes, tail = whole ? 0 : kTailBytes;
  bytes.resize(head + tail);
  read_at(f.fd, bytes.data(), head, 0, path);
  if (tail > 0) read_at(f.fd, bytes.data() + head, tail, size - tail, path);
  bool have_all = whole;
  auto read_all = [&] {
    bytes.resize(size);
    read_at(f.fd, bytes.data(), size, 0, path);
    have_all = true;
  };

  ImageInfo info;
  try {
    info = read_image_info(bytes.data(), head, path);
  } catch (const Error&) {
    if (have_all) throw;
    read_all();  // a header longer than the head: read as the decoder reads it
    info = read_image_info(bytes.data(), size, path);
  }
  ImageFileCheck out;
  out.width = info.width, out.height = info.height, out.orientation = info.orientation;

  // The end: within the tail, or, with the whole file at hand, anywhere after the header.
  const uint8_t* end_region = have_all ? bytes.data() : bytes.data() + head;
  size_t end_size = have_all ? size : tail;
  if (have_all) {
    const size_t from =
        info.format == ImageFormat::Jpeg ? jpeg_scan_start(bytes.data(), size) : std::min<size_t>(size, 8);
    end_region += from, end_size -= from;
  }
  const bool complete =
      info.format == ImageFormat::Jpeg ? holds_eoi(end_region, end_size) : holds_iend(end_region, end_size);
  if (complete) return out;
  // No end where it belongs: truncated, or followed by other data. The decoder decides.
  if (!have_all) read_all();
  decode_image(bytes.data(), size, path);
  return out;
}

}  // namespace

ImageFileCheck check_image_file(const std::string& path) {
  std::vector<uint8_t> bytes;
  try {
    return check(path, bytes);
  } catch (const Error& e) {
    ImageFileCheck bad;
    bad.error = e.what();
    return bad;
  }
}

std::vector<ImageFileCheck> check_image_files(const std::vector<std::string>& paths) {
  std::vector<ImageFileCheck> out(paths.size());
  // Blocks of files: a task per file would cost more in scheduling than a warm header check.
  parallel_blocks(int64_t(paths.size()), 64, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> bytes;
    for (int64_t i = begin; i < end; ++i) {
      try {
        out[i] = check(paths[i], bytes);
      } catch (const Error& e) {
        out[i].error = e.what();
      }
    }
  });
  return out;
}

}  // namespace kiln
