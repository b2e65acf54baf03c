// MNIST IDX files: a big-endian magic (0x0000 08 <ndim>, 08 = unsigned byte), ndim
// big-endian uint32 sizes, then the raw bytes.
#include <fmt/ranges.h>

#include <cstring>

#include "core/file_io.h"
#include "data/idx_labels.h"
#include "kiln/data.h"
#include "kiln/error.h"

namespace kiln {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;

const char* kIdxHint =
    "for the digits dataset run scripts/setup.sh (it builds the IDX files with kiln_make_digits); "
    "for MNIST download and gunzip the four *-ubyte files into that directory";

uint32_t read_be32(const std::vector<uint8_t>& bytes, size_t at) {
  return (uint32_t(bytes[at]) << 24) | (uint32_t(bytes[at + 1]) << 16) |
         (uint32_t(bytes[at + 2]) << 8) | uint32_t(bytes[at + 3]);
}

void put_be32(std::vector<uint8_t>& bytes, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(uint8_t(value >> shift));
}

// Checks magic and size of one IDX file and returns its dimension sizes.
std::vector<uint32_t> parse_idx_header(const std::vector<uint8_t>& bytes, const std::string& path,
                                       uint32_t magic, const char* kind) {
  uint32_t ndim = magic & 0xff;
  size_t header = 4 + 4 * size_t(ndim);
  if (bytes.size() < 4) fail("IDX file '{}' is truncated: {} bytes, too short for a header", path, bytes.size());
  uint32_t found = read_be32(bytes, 0);
  if (found != magic)
    fail("IDX file '{}' has magic 0x{:08x}, expected 0x{:08x} for an {} file (is it gzipped, or "
         "images and labels swapped?)", path, found, magic, kind);
  if (bytes.size() < header)
    fail("IDX file '{}' is truncated: {} bytes, the header alone needs {}", path, bytes.size(), header);
  std::vector<uint32_t> dims(ndim);
  // Up to three 32-bit sizes: their product can pass 2^64 (4 x 2^31 x 2^31 would wrap to 0 and pass
  // as an empty payload), never 2^128.
  unsigned __int128 payload = 1;
  for (uint32_t d = 0; d < ndim; ++d) {
    dims[d] = read_be32(bytes, 4 + 4 * d);
    payload *= dims[d];
  }
  if (payload > bytes.size())
    fail("IDX file '{}' is truncated: {} bytes, its header promises {} bytes of data ({})", path, bytes.size(),
         fmt::to_string(payload), fmt::join(dims, " x "));
  const uint64_t expected = header + uint64_t(payload);
  if (bytes.size() < expected)
    fail("IDX file '{}' is truncated: {} bytes, its header promises {}", path, bytes.size(), expected);
  if (bytes.size() > expected)
    fail("IDX file '{}' has {} bytes after the data its header describes (expected {} bytes in "
         "total)", path, bytes.size() - expected, expected);
  return dims;
}

}  // namespace

Dataset read_idx(const std::string& images_path, const std::string& labels_path, int num_classes) {
  if (num_classes <= 0 || num_classes > 256)
    fail("read_idx: num_classes must be in 1..256 (labels are bytes), got {}", num_classes);
  std::vector<uint8_t> image_bytes = read_file_bytes(images_path, kIdxHint);
  std::vector<uint32_t> image_dims = parse_idx_header(image_bytes, images_path, kImagesMagic, "images");
  std::vector<uint8_t> label_bytes = read_file_bytes(labels_path, kIdxHint);
  std::vector<uint32_t> label_dims = parse_idx_header(label_bytes, labels_path, kLabelsMagic, "labels");
  if (image_dims[0] != label_dims[0])
    fail("IDX count mismatch: '{}' holds {} images but '{}' holds {} labels", images_path,
         image_dims[0], labels_path, label_dims[0]);
  if (image_dims[1] == 0 || image_dims[2] == 0)
    fail("IDX file '{}' has empty images ({}x{})", images_path, image_dims[1], image_dims[2]);

  Dataset ds;
  ds.count = image_dims[0];
  ds.height = image_dims[1];
  ds.width = image_dims[2];
  ds.channels = 1;
  ds.num_classes = num_classes;
  ds.images.assign(image_bytes.begin() + 16, image_bytes.end());
  ds.labels.resize(ds.count);
  for (int64_t i = 0; i < ds.count; ++i) {
    int label = label_bytes[8 + i];
    if (label >= num_classes)
      fail("IDX file '{}': label {} at index {} is out of range, expected 0..{}", labels_path,
           label, i, num_classes - 1);
    ds.labels[i] = label;
  }
  return ds;
}

std::vector<int32_t> read_idx_labels(const std::string& labels_path) {
  const std::vector<uint8_t> bytes = read_file_bytes(labels_path, kIdxHint);
  const std::vector<uint32_t> dims = parse_idx_header(bytes, labels_path, kLabelsMagic, "labels");
  return std::vector<int32_t>(bytes.begin() + 8, bytes.begin() + 8 + dims[0]);
}

void write_idx(const Dataset& ds, const std::string& images_path, const std::string& labels_path) {
  if (ds.channels != 1)
    fail("write_idx('{}'): IDX holds single-channel images, the dataset has {} channels",
         images_path, ds.channels);
  if (int64_t(ds.images.size()) != ds.count * ds.image_size() || int64_t(ds.labels.size()) != ds.count)
    fail("write_idx('{}'): dataset is inconsistent: count {} but {} image bytes and {} labels",
         images_path, ds.count, ds.images.size(), ds.labels.size());
  for (int64_t i = 0; i < ds.count; ++i)
    if (ds.labels[i] < 0 || ds.labels[i] > 255)
      fail("write_idx('{}'): label {} at index {} does not fit in a byte", labels_path, ds.labels[i], i);

  std::vector<uint8_t> image_header, label_header;
  put_be32(image_header, kImagesMagic);
  for (int64_t d : {ds.count, ds.height, ds.width}) put_be32(image_header, uint32_t(d));
  put_be32(label_header, kLabelsMagic);
  put_be32(label_header, uint32_t(ds.count));
  std::vector<uint8_t> labels(ds.labels.begin(), ds.labels.end());

  write_file_atomic(images_path, {std::as_bytes(std::span(image_header)), std::as_bytes(std::span(ds.images))});
  write_file_atomic(labels_path, {std::as_bytes(std::span(label_header)), std::as_bytes(std::span(labels))});
}

}  // namespace kiln
