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

}  // namespace

PackRecords::PackRecords(const std::string& dir, const PackSplit& split, int num_classes) {
  try {
    // The shards, mapped whole.
    for (size_t s = 0; s < split.shards.size(); ++s) {
      const std::string path = (fs::path(dir) / split.shards[s]).string();
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        if (errno == ENOENT)
          fail("shard '{}' of the kiln pack '{}' is missing; copy the whole pack folder again, or {}", path, dir,
               kRemake);
        fail("cannot open pack shard '{}': {}; check its permissions", path, std::strerror(errno));
      }
      struct stat st {};
      if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        fail("cannot read pack shard '{}': {}", path, std::strerror(err));
      }
      const int64_t size = int64_t(st.st_size);
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
      void* map = ::mmap(nullptr, size_t(size), PROT_READ, MAP_SHARED, fd, 0);
      const int map_err = errno;
      ::close(fd);
      if (map == MAP_FAILED) fail("cannot map pack shard '{}' into memory: {}", path, std::strerror(map_err));
      shards_.push_back({path, static_cast<const uint8_t*>(map), size_t(size)});
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
      if (e.shard >= shards_.size())
        fail("entry {} of pack index '{}' names shard {}, but the split has {} shards; the index is damaged: {}", i,
             index_path, e.shard, shards_.size(), kRemake);
      const Shard& shard = shards_[e.shard];
      if (e.offset < uint64_t(kShardHeaderBytes) || e.offset > shard.size || shard.size - e.offset < e.size)
        fail("entry {} of pack index '{}' points outside its shard '{}' (bytes {} to {} of a {}-byte file); the index "
             "is damaged: {}", i, index_path, shard.path, e.offset, e.offset + e.size, shard.size, kRemake);
      if (e.label >= uint32_t(num_classes))
        fail("entry {} of pack index '{}' has label {}, but the pack has {} classes; the index is damaged: {}", i,
             index_path, e.label, num_classes, kRemake);
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
    fail("record {} of '{}' is damaged (checksum mismatch); {}, or pass --skip-bad", i, shard.path, kRemake);
}

std::string PackRecords::name(int64_t i) const {
  return fmt::format("record {} of {}", i, shards_[entries_[size_t(i)].shard].path);
}

}  // namespace kiln
