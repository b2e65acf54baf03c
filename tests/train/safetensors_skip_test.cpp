// load_safetensors reading past the dtypes kiln does not compute in (SafetensorsReadOptions::
// skip_unsupported_dtypes), as PyTorch's files hold them: listed without data, their header entries
// checked as strictly as any tensor's; without the option (checkpoints) they are still refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <string>
#include <vector>

#include "support/hand_written_safetensors.h"
#include "kiln/checkpoint.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

using testing::expect_error;
using testing::le_bytes;
using testing::RawTensor;
using testing::TempDir;
using testing::write_safetensors_by_hand;

SafetensorsFile load_skipping(const std::string& path) {
  SafetensorsReadOptions o;
  o.skip_unsupported_dtypes = true;
  return load_safetensors(path, o);
}

std::pair<uint64_t, uint64_t> at(uint64_t begin, uint64_t end) { return {begin, end}; }

RawTensor f32(const std::string& name, const std::vector<float>& v) {
  return {name, "F32", {int64_t(v.size())}, le_bytes(v)};
}

// One tensor of every dtype of the format that kiln has no DType for, with its width in bytes.
struct Foreign {
  const char* dtype;
  Shape shape;
  size_t bytes;
};
const std::vector<Foreign> kForeign = {
    {"BOOL", {3}, 3},    {"I8", {2}, 2},      {"I16", {2}, 4},      {"U16", {1}, 2},     {"U32", {2}, 8},
    {"I64", {}, 8},      {"U64", {2}, 16},    {"C64", {1}, 8},      {"F8_E4M3", {5}, 5}, {"F8_E5M2", {1}, 1},
    {"F8_E8M0", {2}, 2}, {"F4", {2, 3}, 3},   {"F6_E2M3", {4}, 3},  {"F6_E3M2", {8}, 6}};

TEST(SafetensorsSkip, EveryOtherDtypeOfTheFormatIsListedWithoutDataAndTheRestLoads) {
  TempDir dir;
  const std::string file = dir.file("foreign.safetensors");
  std::vector<RawTensor> tensors = {f32("first", {1.5f, -2.f})};
  for (const Foreign& f : kForeign) {
    std::vector<uint8_t> data(f.bytes);
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(0xA0 + i);
    tensors.push_back({fmt::format("t.{}", f.dtype), f.dtype, f.shape, data});
  }
  tensors.push_back(f32("last", {3.f}));
  write_safetensors_by_hand(file, tensors, {{"source", "pytorch"}});

  const SafetensorsFile read = load_skipping(file);
  ASSERT_EQ(read.tensors.size(), 2u);
  EXPECT_EQ(read.tensors[0].name, "first");
  EXPECT_EQ(read.tensors[1].name, "last");
  float last = 0;
  std::memcpy(&last, read.tensors[1].data.data(), 4);
  EXPECT_EQ(last, 3.f);  // the data after the skipped ones is where their offsets say
  ASSERT_EQ(read.skipped.size(), kForeign.size());
  for (size_t i = 0; i < kForeign.size(); ++i) {  // in file data order
    EXPECT_EQ(read.skipped[i].name, fmt::format("t.{}", kForeign[i].dtype));
    EXPECT_EQ(read.skipped[i].dtype, kForeign[i].dtype);
    EXPECT_EQ(read.skipped[i].shape, kForeign[i].shape);
  }
  ASSERT_NE(read.find_skipped("t.I64"), nullptr);
  EXPECT_EQ(read.find_skipped("t.I64")->dtype, "I64");
  EXPECT_EQ(read.find_skipped("first"), nullptr);
  EXPECT_EQ(read.find("t.I64"), nullptr);
  EXPECT_EQ(read.metadata.at("source"), "pytorch");

  // Without the option (a checkpoint): refused, naming the first such tensor and its dtype.
  expect_error([&] { load_safetensors(file); }, {file, "unsupported dtype", "kiln reads F32"});
  const std::string i64 = dir.file("i64.safetensors");
  write_safetensors_by_hand(i64, {{"bn.num_batches_tracked", "I64", {}, le_bytes(std::vector<int64_t>{7})}});
  expect_error([&] { load_safetensors(i64); }, {"tensor 'bn.num_batches_tracked'", "unsupported dtype \"I64\""});
  EXPECT_EQ(load_skipping(i64).skipped.size(), 1u);
}

TEST(SafetensorsSkip, ASkippedTensorsEntryIsCheckedAsStrictlyAsAnyTensors) {
  TempDir dir;
  const std::string file = dir.file("bad.safetensors");
  const std::vector<uint8_t> counter = le_bytes(std::vector<int64_t>{100});
  auto refused = [&](const std::vector<RawTensor>& tensors, const std::vector<std::string>& parts) {
    write_safetensors_by_hand(file, tensors);
    expect_error([&] { load_skipping(file); }, parts);
  };
  // Offsets past the end of the file.
  refused({f32("w", {1.f}), {"bn.num_batches_tracked", "I64", {}, counter, at(4, 20)}},
          {file, "tensor 'bn.num_batches_tracked'", "data_offsets [4, 20] run past the 12 data bytes"});
  // Fewer bytes than the shape needs.
  refused({f32("w", {1.f}), {"bn.num_batches_tracked", "I64", {}, std::vector<uint8_t>(4)}},
          {"tensor 'bn.num_batches_tracked'", "shape [] of I64 needs 8 bytes", "hold 4"});
  // Overlapping a tensor kiln reads.
  refused({f32("w", {1.f, 2.f}), {"n", "I64", {}, {}, at(0, 8)}}, {"overlaps"});
  // Leaving a hole before the next tensor.
  refused({{"n", "I64", {}, counter, at(0, 8)}, {"w", "F32", {1}, {0, 0, 0, 0, 0, 0, 0, 0},
                                                                    at(12, 16)}},
          {"4 unindexed bytes before tensor 'w'"});
  // Packed 4-bit elements that end inside a byte.
  refused({{"q", "F4", {3}, {0, 0}}}, {"tensor 'q'", "ends inside a byte", "4-bit"});
  // A dtype the format does not have: refused even when skipping, listing the format's.
  refused({{"n", "I65", {}, counter}}, {"tensor 'n'", "unknown dtype \"I65\"", "I64", "F8_E4M3", "BOOL"});
  write_safetensors_by_hand(file, {{"n", "I64", {}, counter}});
  EXPECT_EQ(load_skipping(file).skipped.size(), 1u);  // the same file, well formed, loads
}

TEST(SafetensorsSkip, AChecksumOfASkippedTensorIsVerified) {
  TempDir dir;
  const std::string file = dir.file("summed.safetensors");
  const std::vector<uint8_t> counter = le_bytes(std::vector<int64_t>{100});
  // zlib's CRC-32 of the eight bytes 64 00 00 00 00 00 00 00 (Python: zlib.crc32), then a wrong one.
  const std::string crc = "31837128";
  write_safetensors_by_hand(file, {{"n", "I64", {}, counter}}, {{"kiln.crc32.n", crc}});
  const SafetensorsFile read = load_skipping(file);
  ASSERT_EQ(read.skipped.size(), 1u);  // the checksum names a tensor of the file: no complaint
  EXPECT_TRUE(read.metadata.empty());  // and is taken out like any other
  write_safetensors_by_hand(file, {{"n", "I64", {}, counter}}, {{"kiln.crc32.n", "00000000"}});
  expect_error([&] { load_skipping(file); }, {"is corrupt", "tensor 'n'"});
}

}  // namespace
}  // namespace kiln
