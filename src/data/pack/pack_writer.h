#pragma once
// `kiln pack`: an image folder as a packed dataset, read back through mmap (pack_records.h), so
// training reads a few large files instead of a million small ones.
//
// The format, version 1. OUT/ is a folder holding:
//
//   kiln-pack.json   {"format": "kiln-pack", "version": 1,
//                     "classes": ["cat", "dog", ...],            (sorted; labels are their ranks)
//                     "settings": {"max_side": 512, "quality": 90},
//                     "splits": {"train": {"count": N, "index": "train.kpi",
//                                          "shards": ["train-00000.kpk", ...],
//                                          "shard_bytes": [268435123, ...],   (each shard's file size)
//                                          "sources": "train.kps",
//                                          "kept": K, "reencoded": R,
//                                          "skipped": ["train/fish/img_0007.jpg", ...]},
//                                "val": {...}}}                  ("val" only when the source has one)
//   train-00000.kpk  shards of about --shard-mb MB: a 16-byte header, then the records back to
//   train-00001.kpk  back, in index order. Header: "KPK1", u32 version (1), u32 shard number,
//   ...              u32 0. A record is an encoded image (JPEG, see below); a shard holds at
//                    least one record and ends a record before going over shard_bytes.
//   train.kpi        the split's index: a 16-byte header "KPI1", u32 version (1), u64 record count,
//                    then one 24-byte entry per record, in the source folder's order (by class,
//                    then path, as scan_image_folder lists them):
//                      u32 shard number, u64 offset of the payload in that shard, u32 payload size,
//                      u32 label, u32 CRC-32 of the payload (zlib's crc32).
//   train.kps        the split's source list: where each record came from, so that an error about
//                    a record can name the file the user can replace. A 16-byte header "KPS1",
//                    u32 version (1), u64 record count, then count + 1 u64 offsets (the first 0,
//                    rising strictly), then the paths' bytes back to back: record i's path is bytes
//                    [offset i, offset i+1) of them, relative to the packed folder and written
//                    with '/' ("train/fish/img_0007.jpg"; the full path when a file lies outside
//                    it, reached through a link).
//   val-00000.kpk ..., val.kpi, val.kps: the same for the validation split.
//
// Versions: "sources" (and "skipped") came after the rest within version 1. They are additions a
// reader may ignore, so the version stayed 1: an older kiln reads a newer pack (naming records by
// shard only), and this one reads a pack without them, naming its records by shard alone and
// saying that the pack predates source lists.
//
// Every integer is little-endian. Every image is decoded whole before it is packed (kiln's own
// decoders, as training will read it): one that cannot be decoded is refused, naming its file, or
// with skip_bad left out and listed under "skipped" (the split's count, index and labels then hold
// only the packed records). Records: a JPEG already within max_side (its longer side at most
// max_side) is stored as the original file's bytes (no generation loss); any other image (PNG, a
// larger JPEG) is downscaled from its decoded pixels (gray when it is stored gray, else RGB as
// PIL's convert('RGB')) with resize_box_bilinear so that its longer side is max_side (never
// upscaled), and encoded as a baseline 4:2:0 JPEG (1-channel when gray) at the given quality,
// keeping the source's EXIF orientation tag. The bytes written depend only on the source folder
// and max_side / quality / shard_bytes / skip_bad, never on the worker count.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

namespace pack_format {
inline constexpr int kVersion = 1;
inline constexpr char kShardMagic[4] = {'K', 'P', 'K', '1'};
inline constexpr char kIndexMagic[4] = {'K', 'P', 'I', '1'};
inline constexpr char kSourcesMagic[4] = {'K', 'P', 'S', '1'};
inline constexpr int64_t kShardHeaderBytes = 16;
inline constexpr int64_t kIndexHeaderBytes = 16;
inline constexpr int64_t kIndexEntryBytes = 24;
inline constexpr int64_t kSourcesHeaderBytes = 16;
inline constexpr const char* kManifestName = "kiln-pack.json";
inline constexpr const char* kFormatName = "kiln-pack";

inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline uint64_t load_u64(const uint8_t* p) { return uint64_t(load_u32(p)) | uint64_t(load_u32(p + 4)) << 32; }
inline void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void store_u64(uint8_t* p, uint64_t v) {
  store_u32(p, uint32_t(v));
  store_u32(p + 4, uint32_t(v >> 32));
}
// "train-00003.kpk"
std::string shard_name(const std::string& split, int shard);
// "train.kps"
std::string sources_name(const std::string& split);
}  // namespace pack_format

struct PackOptions {
  int max_side = 512;                // longer side of re-encoded images, >= 1
  int quality = 90;                  // JPEG quality of re-encoded images, 1..100
  int64_t shard_bytes = 256 << 20;   // a shard ends before going over this (one record may exceed it)
  int workers = 0;                   // decode/encode threads; 0: all cores
  bool progress = true;              // a progress line on stdout about every second, and a summary
  // Images that cannot be decoded are left out and listed (PackResult::skipped, and the summary)
  // instead of stopping the pack.
  bool skip_bad = false;
};

// An image left out with skip_bad.
struct PackSkipped {
  std::string source;  // relative to the packed folder, as the pack's source list writes it
  std::string reason;  // the decoder's error, naming the file's full path
};

struct PackResult {
  int64_t train = 0, val = 0;          // records packed
  std::vector<PackSkipped> skipped;    // training ones first, each split in folder order
  // Classes with no training record left after skipping (their label then has no sample).
  std::vector<std::string> empty_classes;
};

// Packs the image folder `source_dir` (train/ and val/ holding class folders, or class folders
// directly: then a train split only; scan_image_folder lists each) into the new folder `out_dir`.
// Everything is written to "<out_dir>.partial" and renamed to out_dir at the end; an existing
// out_dir (or a leftover .partial) is refused, never overwritten. Errors (kiln::Error) name the
// file and the fix: an unreadable or undecodable source image (the first in folder order, unless
// skip_bad), images kiln cannot read, val classes unlike train's, no training image left after
// skipping, a write failure (the .partial folder is removed then).
PackResult write_pack(const std::string& source_dir, const std::string& out_dir, const PackOptions& options);

}  // namespace kiln
