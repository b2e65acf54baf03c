// CIFAR-10 binary batches: fixed-size records of one label byte followed by a 32x32 image
// stored channel-planar (1024 R, 1024 G, 1024 B); kiln keeps images interleaved (HWC).
#include "core/file_io.h"
#include "kiln/data.h"
#include "kiln/error.h"

namespace kiln {
namespace {

constexpr int64_t kSide = 32, kChannels = 3, kPlane = kSide * kSide;
constexpr int64_t kImageBytes = kChannels * kPlane, kRecordBytes = 1 + kImageBytes;

const char* kCifarHint =
    "download cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and "
    "extract it (it contains cifar-10-batches-bin/)";

}  // namespace

Dataset read_cifar10(const std::vector<std::string>& batch_files) {
  if (batch_files.empty()) fail("read_cifar10: no batch files given");
  Dataset ds;
  ds.height = ds.width = kSide;
  ds.channels = kChannels;
  ds.num_classes = 10;
  for (const std::string& path : batch_files) {
    std::vector<uint8_t> bytes = read_file_bytes(path, kCifarHint);
    if (bytes.empty()) fail("CIFAR-10 file '{}' is empty", path);
    if (bytes.size() % kRecordBytes != 0)
      fail("CIFAR-10 file '{}' has {} bytes, not a multiple of the {}-byte record size (truncated, "
           "or not a binary-version batch?)", path, bytes.size(), kRecordBytes);
    int64_t records = int64_t(bytes.size()) / kRecordBytes;
    size_t base = ds.images.size();
    ds.images.resize(base + records * kImageBytes);
    ds.labels.reserve(ds.labels.size() + records);
    for (int64_t r = 0; r < records; ++r) {
      const uint8_t* record = bytes.data() + r * kRecordBytes;
      if (record[0] >= ds.num_classes)
        fail("CIFAR-10 file '{}': label {} of record {} is out of range, expected 0..9", path,
             int(record[0]), r);
      ds.labels.push_back(record[0]);
      uint8_t* out = ds.images.data() + base + r * kImageBytes;
      for (int64_t p = 0; p < kPlane; ++p)
        for (int64_t c = 0; c < kChannels; ++c) out[p * kChannels + c] = record[1 + c * kPlane + p];
    }
    ds.count += records;
  }
  return ds;
}

}  // namespace kiln
