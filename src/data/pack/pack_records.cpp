#include "data/pack/pack_records.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/file_io.h"
#include "data/pack/pack_writer.h"
#include "kiln/error.h"

namespace kiln {
namespace fs = std::filesystem;
using namespace pack_format;

namespace {

constexpr const char* kRemake = "re-create the pack with kiln pack";

// Opens a file of the pack at `path`; a missing one is an incomplete copy.
int open_pack_file(const std::string& path, const std::string& dir, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) return fd;
  if (errno == ENOENT)
    fail("{} '{}' of the kiln pack '{}' is missing; copy the whole pack folder again, or {}", what, path, dir, kRemake);
  fail("cannot open {} '{}': {}; check its permissions", what, path, std::strerror(errno));
}

int64_t file_size_of(int fd, const std::string& path, const char* what) {
  struct stat st {};
  if (::fstat(fd, &st) == 0) return int64_t(st.st_size);
  const int err = errno;
  ::close(fd);
  fail("cannot read {} '{}': {}", what, path, std::strerror(err));
}

// Maps `size` (> 0) bytes of `fd` read-only and closes it.
const uint8_t* map_and_close(int fd, int64_t size, const std::string& path, const char* what) {
  void* map = ::mmap(nullptr, size_t(size), PROT_READ, MAP_SHARED, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (map == MAP_FAILED) fail("cannot map {} '{}' into memory: {}", what, path, std::strerror(map_err));
  return static_cast<const uint8_t*>(map);
}

}  // namespace

PackRecords::PackRecords(const std::string& dir, const PackSplit& split, int num_classes) {
  try {
    // The shards, mapped whole.
    for (size_t s = 0; s < split.shards.size(); ++s) {
      const std::string path = (fs::path(dir) / split.shards[s]).string();
      const int fd = open_pack_file(path, dir, "pack shard");
      const int64_t size = file_size_of(fd, path, "pack shard");
      const int64_t expected = s < split.shard_bytes.size() ? split.shard_bytes[s] : -1;
      if (size != expected) {
        ::close(fd);
        if (size < expected)
          fail("pack shard '{}' is truncated: {} bytes where {} records {}; the copy is incomplete: copy the pack "
               "again, or {}", path, size, (fs::path(dir) / kManifestName).string(), expected, kRemake);
        fail("pack shard '{}' is {} bytes where {} records {}; the shard does not belong to this pack: copy the pack "
             "again, or {}", path, size, (fs::path(dir) / kManifestName).string(), expected, kRemake);
      }
      if (size < kShardHeaderBytes) {
        ::close(fd);
        fail("'{}' is not a kiln pack shard ({} bytes, shorter than its header); {}", path, size, kRemake);
      }
      shards_.push_back({path, map_and_close(fd, size, path, "pack shard"), size_t(size)});
      const uint8_t* h = shards_.back().data;
      if (std::memcmp(h, kShardMagic, 4) != 0)
        fail("'{}' is not a kiln pack shard (it does not start with KPK1); the file was replaced or damaged: {}",
             path, kRemake);
      if (load_u32(h + 4) != uint32_t(kVersion))
        fail("pack shard '{}' is of format version {}, this kiln reads version {}; {} with this kiln", path,
             load_u32(h + 4), kVersion, kRemake);
      if (load_u32(h + 8) != uint32_t(s))
        fail("pack shard '{}' says it is shard {} of its split, but it is listed as shard {}; the files were "
             "renamed or mixed up: {}", path, load_u32(h + 8), s, kRemake);
    }

    map_sources(dir, split);

    // The index, checked entry by entry.
    const std::string index_path = (fs::path(dir) / split.index).string();
    const std::vector<uint8_t> index = read_file_bytes(index_path, std::string("the pack is incomplete: ") + kRemake);
    if (int64_t(index.size()) < kIndexHeaderBytes || std::memcmp(index.data(), kIndexMagic, 4) != 0)
      fail("'{}' is not a kiln pack index (it does not start with KPI1); {}", index_path, kRemake);
    if (load_u32(index.data() + 4) != uint32_t(kVersion))
      fail("pack index '{}' is of format version {}, this kiln reads version {}; {} with this kiln", index_path,
           load_u32(index.data() + 4), kVersion, kRemake);
    const uint64_t count = load_u64(index.data() + 8);
    if (count != uint64_t(split.count))
      fail("pack index '{}' holds {} records where kiln-pack.json says {}; {}", index_path, count, split.count,
           kRemake);
    const int64_t want = kIndexHeaderBytes + split.count * kIndexEntryBytes;
    if (int64_t(index.size()) != want)
      fail("pack index '{}' is {} bytes, {} for its {} records; it is {}: {}", index_path, index.size(), want,
           split.count, int64_t(index.size()) < want ? "truncated" : "damaged", kRemake);
    entries_.resize(size_t(split.count));
    for (int64_t i = 0; i < split.count; ++i) {
      const uint8_t* p = index.data() + kIndexHeaderBytes + i * kIndexEntryBytes;
      Entry& e = entries_[size_t(i)];
      e.shard = load_u32(p);
      e.offset = load_u64(p + 4);
      e.size = load_u32(p + 12);
      e.label = load_u32(p + 16);
      e.crc = load_u32(p + 20);
      const std::string from = sources_.data ? fmt::format(" (source: {})", source(i)) : "";
      if (e.shard >= shards_.size())
        fail("entry {}{} of pack index '{}' names shard {}, but the split has {} shards; the index is damaged: {}", i,
             from, index_path, e.shard, shards_.size(), kRemake);
      const Shard& shard = shards_[e.shard];
      if (e.offset < uint64_t(kShardHeaderBytes) || e.offset > shard.size || shard.size - e.offset < e.size)
        fail("entry {}{} of pack index '{}' points outside its shard '{}' (bytes {} to {} of a {}-byte file); the "
             "index is damaged: {}", i, from, index_path, shard.path, e.offset, e.offset + e.size, shard.size, kRemake);
      if (e.label >= uint32_t(num_classes))
        fail("entry {}{} of pack index '{}' has label {}, but the pack has {} classes; the index is damaged: {}", i,
             from, index_path, e.label, num_classes, kRemake);
    }
  } catch (...) {
    unmap();
    throw;
  }
}

PackRecords::~PackRecords() { unmap(); }

void PackRecords::unmap() {
  for (Shard& s : shards_)
    if (s.data) ::munmap(const_cast<uint8_t*>(s.data), s.size);
  shards_.clear();
  if (sources_.data) ::munmap(const_cast<uint8_t*>(sources_.data), sources_.size);
  sources_ = {};
}

// The source list, mapped whole (it is read only for messages) after checking its header and
// offsets, so that source() needs no check.
void PackRecords::map_sources(const std::string& dir, const PackSplit& split) {
  if (split.sources.empty()) return;
  const std::string path = (fs::path(dir) / split.sources).string();
  const int fd = open_pack_file(path, dir, "pack source list");
  const int64_t size = file_size_of(fd, path, "pack source list");
  const int64_t table = kSourcesHeaderBytes + 8 * (split.count + 1);
  if (size < table) {
    ::close(fd);
    fail("pack source list '{}' is {} bytes, shorter than its {} records need ({}); it is truncated: copy the pack "
         "again, or {}", path, size, split.count, table, kRemake);
  }
  sources_ = {path, map_and_close(fd, size, path, "pack source list"), size_t(size)};
  const uint8_t* h = sources_.data;
  if (std::memcmp(h, kSourcesMagic, 4) != 0)
    fail("'{}' is not a kiln pack source list (it does not start with KPS1); {}", path, kRemake);
  if (load_u32(h + 4) != uint32_t(kVersion))
    fail("pack source list '{}' is of format version {}, this kiln reads version {}; {} with this kiln", path,
         load_u32(h + 4), kVersion, kRemake);
  if (load_u64(h + 8) != uint64_t(split.count))
    fail("pack source list '{}' holds {} records where kiln-pack.json says {}; {}", path, load_u64(h + 8),
         split.count, kRemake);
  source_text_ = h + table;
  const uint64_t text = uint64_t(size - table);
  const uint8_t* offsets = h + kSourcesHeaderBytes;
  if (load_u64(offsets) != 0)
    fail("pack source list '{}' does not start its first path at offset 0; it is damaged: {}", path, kRemake);
  for (int64_t i = 0; i < split.count; ++i) {
    const uint64_t from = load_u64(offsets + 8 * i), to = load_u64(offsets + 8 * (i + 1));
    if (to <= from || to > text)
      fail("entry {} of pack source list '{}' spans bytes {} to {} of its {}-byte text; it is damaged: {}", i, path,
           from, to, text, kRemake);
  }
  if (split.count > 0 && load_u64(offsets + 8 * split.count) != text)
    fail("pack source list '{}' has {} bytes after its last path; it is damaged: {}", path,
         text - load_u64(offsets + 8 * split.count), kRemake);
}

void PackRecords::read(int64_t i, std::vector<uint8_t>& bytes) const {
  if (i < 0 || i >= count()) fail("record {} is outside the pack split ({} records)", i, count());
  const Entry& e = entries_[size_t(i)];
  const Shard& shard = shards_[e.shard];
  // Checked when the index was read; checked again as the bytes are about to be touched.
  if (e.offset > shard.size || shard.size - e.offset < e.size)
    fail("record {} of '{}' lies outside its shard; {}", i, shard.path, kRemake);
  const uint8_t* payload = shard.data + e.offset;
  bytes.assign(payload, payload + e.size);
  if (uint32_t(crc32(0L, bytes.data(), uInt(bytes.size()))) != e.crc)
    fail("{} is damaged (checksum mismatch): its bytes changed after kiln pack wrote them (a bad copy or disk); copy "
         "the pack again, or re-create it with kiln pack from its source folder, or pass --skip-bad to leave the "
         "record out", name(i));
}

std::string PackRecords::source(int64_t i) const {
  if (!sources_.data) return {};
  const uint8_t* offsets = sources_.data + kSourcesHeaderBytes;
  const uint64_t from = load_u64(offsets + 8 * i), to = load_u64(offsets + 8 * (i + 1));
  return std::string(reinterpret_cast<const char*>(source_text_ + from), size_t(to - from));
}

std::string PackRecords::name(int64_t i) const {
  const std::string& shard = shards_[entries_[size_t(i)].shard].path;
  if (!sources_.data)
    return fmt::format("record {} of {} (source file not recorded: the pack predates source lists; re-pack its "
                       "folder with kiln pack, which checks every image and names the bad ones)", i, shard);
  return fmt::format("record {} of {} (source: {})", i, shard, source(i));
}

}  // namespace kiln
