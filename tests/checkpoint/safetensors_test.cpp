#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "support/temp_dir.h"
#include "kiln/checkpoint.h"
#include "kiln/error.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::expect_error;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

NamedTensor random_tensor(const std::string& name, DType dtype, Shape shape, std::mt19937& rng) {
  NamedTensor t{name, dtype, shape, std::vector<std::byte>(numel(shape) * dtype_size(dtype))};
  for (std::byte& b : t.data) b = std::byte(rng());
  return t;
}

// A file assembled by hand: header length, header text (padded to 8), data.
void write_file(const std::string& path, std::string header, const std::vector<uint8_t>& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(uint8_t(uint64_t(header.size()) >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  write_bytes(path, bytes);
}

void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  write_file(path, header, std::vector<uint8_t>(data_bytes, 0x11));
}

uint64_t header_length(const std::vector<uint8_t>& file) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(file[i]) << (8 * i);
  return n;
}

std::string header_text(const std::vector<uint8_t>& file) {
  return std::string(file.begin() + 8, file.begin() + 8 + ptrdiff_t(header_length(file)));
}

// Where the data of tensors[index] starts in a file that save_safetensors wrote with `tensors`.
size_t data_offset(const std::vector<uint8_t>& file, const std::vector<NamedTensor>& tensors, size_t index) {
  size_t at = 8 + header_length(file);
  for (size_t i = 0; i < index; ++i) at += tensors[i].data.size();
  return at;
}

// The file as kiln wrote it before checksums: the same, without them.
void drop_checksums(const std::string& path) {
  const std::vector<uint8_t> bytes = read_bytes(path);
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(header_text(bytes));
  std::vector<std::string> keys;
  for (const auto& [key, value] : header["__metadata__"].items())
    if (key.starts_with("kiln.crc32.")) keys.push_back(key);
  for (const std::string& key : keys) header["__metadata__"].erase(key);
  if (header["__metadata__"].empty()) header.erase("__metadata__");
  const std::vector<uint8_t> data(bytes.begin() + 8 + ptrdiff_t(header_length(bytes)), bytes.end());
  write_file(path, header.dump(), data);
}

size_t files_in(const std::filesystem::path& dir) {
  return size_t(std::distance(std::filesystem::directory_iterator(dir), {}));
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  TempDir dir;
  std::mt19937 rng(31);
  std::vector<NamedTensor> tensors{
      random_tensor("conv1.weight", DType::F32, {4, 3, 3, 2}, rng),
      random_tensor("bn.running_mean", DType::F64, {4}, rng),
      random_tensor("half", DType::F16, {2, 5}, rng),
      random_tensor("brain", DType::BF16, {7}, rng),
      random_tensor("mask", DType::U8, {3, 3}, rng),
      random_tensor("step", DType::I32, {}, rng),  // scalar
      random_tensor("empty", DType::F32, {0, 3}, rng),
  };
  std::map<std::string, std::string> metadata{{"epoch", "12"}, {"model", "resnet \"8\"\n"}};
  save_safetensors(dir.file("ck.safetensors"), tensors, metadata);
  EXPECT_EQ(files_in(dir.path()), 1u);

  SafetensorsFile file = load_safetensors(dir.file("ck.safetensors"));
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (const NamedTensor& want : tensors) {
    const NamedTensor* got = file.find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(got->dtype, want.dtype) << want.name;
    EXPECT_EQ(got->shape, want.shape) << want.name;
    EXPECT_EQ(got->data, want.data) << want.name;
  }
  EXPECT_EQ(file.find("absent"), nullptr);
}

TEST(Safetensors, HeaderBytesFollowTheFormat) {
  TempDir dir;
  float values[2] = {1.0f, 2.0f};
  NamedTensor t{"a", DType::F32, {2}, std::vector<std::byte>(8)};
  std::memcpy(t.data.data(), values, 8);
  save_safetensors(dir.file("t"), {t}, {{"k", "v"}});

  // 2e3fa576: the CRC-32 of the 8 data bytes, as Python's zlib.crc32 computes it.
  const std::string json =
      R"({"__metadata__":{"k":"v","kiln.crc32.a":"2e3fa576"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const size_t padded = (json.size() + 7) / 8 * 8;
  std::vector<uint8_t> bytes = read_bytes(dir.file("t"));
  ASSERT_EQ(bytes.size(), 8 + padded + 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(bytes[i]) << (8 * i);
  EXPECT_EQ(n, padded);
  EXPECT_EQ(n % 8, 0u);
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + padded);
  EXPECT_EQ(header, json + std::string(padded - json.size(), ' '));
  // Little-endian IEEE floats 1.0 and 2.0.
  EXPECT_EQ(std::vector<uint8_t>(bytes.end() - 8, bytes.end()),
            (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40}));

  // Without metadata of the caller's, "__metadata__" holds the checksums alone.
  save_safetensors(dir.file("u"), {t});
  bytes = read_bytes(dir.file("u"));
  ASSERT_EQ(bytes.size(), 8u + 104u + 8u);  // 97 JSON bytes padded to 104
  EXPECT_EQ(header_text(bytes),
            R"({"__metadata__":{"kiln.crc32.a":"2e3fa576"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" +
                std::string(7, ' '));
  // Without tensors too, there is no "__metadata__" key at all.
  save_safetensors(dir.file("v"), {});
  EXPECT_EQ(header_text(read_bytes(dir.file("v"))), "{}      ");
}

TEST(Safetensors, ReadsHandWrittenFileWithUnsortedHeader) {
  TempDir dir;
  // Keys out of data order, as other writers may produce.
  write_raw(dir.file("f"),
            R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", 6);
  SafetensorsFile file = load_safetensors(dir.file("f"));
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(file.tensors[0].name, "a");
  EXPECT_EQ(file.find("b")->data.size(), 2u);
  EXPECT_TRUE(file.metadata.empty());
}

// Each malformed file must produce an error naming the file and, where there is one, the tensor.
struct Corruption {
  const char* what;
  std::string header;
  size_t data_bytes;
  std::vector<std::string> expected;  // substrings of the message
};

TEST(Safetensors, RejectsEveryCorruption) {
  TempDir dir;
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::vector<Corruption> cases{
      {"not an object", R"(["w"])", 0, {"not a JSON object"}},
      {"bad json", R"({"w":{"dtype":)", 8, {"malformed JSON"}},
      {"unknown dtype", R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8, {"'w'", "I64"}},
      {"missing shape", R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8, {"'w'", "shape"}},
      {"negative dim", R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, {"'w'", "non-negative"}},
      {"bad offsets", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, {"'w'", "data_offsets"}},
      {"reversed offsets", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8, {"'w'", "end before"}},
      {"out of range", "{" + ok_entry + "}", 6, {"'w'", "run past the 6 data bytes"}},
      {"size mismatch", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, {"'w'", "needs 12 bytes", "hold 8"}},
      {"overlap", "{" + ok_entry + R"(,"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12, {"'v'", "overlaps tensor 'w'"}},
      {"hole", "{" + ok_entry + R"(,"v":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16, {"'v'", "4 unindexed bytes"}},
      {"trailing bytes", "{" + ok_entry + "}", 9, {"1 bytes after the last tensor"}},
      {"metadata not strings", "{" + ok_entry + R"(,"__metadata__":{"epoch":3}})", 8, {"'epoch'", "not a string"}},
  };
  for (const Corruption& c : cases) {
    write_raw(dir.file("bad"), c.header, c.data_bytes);
    std::string msg = error_of([&] { load_safetensors(dir.file("bad")); });
    EXPECT_NE(msg.find(dir.file("bad")), std::string::npos) << c.what << ": " << msg;
    for (const std::string& s : c.expected) EXPECT_NE(msg.find(s), std::string::npos) << c.what << ": " << msg;
  }
}

TEST(Safetensors, RejectsTruncationAndBadHeaderLength) {
  TempDir dir;
  std::mt19937 rng(32);
  save_safetensors(dir.file("good"), {random_tensor("w", DType::F32, {16}, rng)});
  std::vector<uint8_t> good = read_bytes(dir.file("good"));

  auto expect_error = [&](std::vector<uint8_t> bytes, const std::string& needle) {
    write_bytes(dir.file("bad"), bytes);
    std::string msg = error_of([&] { load_safetensors(dir.file("bad")); });
    EXPECT_NE(msg.find(dir.file("bad")), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  };
  expect_error({1, 2, 3}, "truncated");                                      // no length
  expect_error(std::vector<uint8_t>(good.begin(), good.begin() + 20), "truncated");  // header cut
  expect_error(std::vector<uint8_t>(good.begin(), good.end() - 1), "'w'");   // data cut
  std::vector<uint8_t> huge = good;
  huge[7] = 0x10;  // header length ~2^60
  expect_error(huge, "implausible header length");
  std::vector<uint8_t> zero = good;
  std::fill(zero.begin(), zero.begin() + 8, 0);
  expect_error(zero, "implausible header length");

  std::string msg = error_of([&] { load_safetensors(dir.file("absent")); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

// ---- checksums ----

void expect_corrupt(const std::string& path, const std::string& tensor, const std::string& what) {
  expect_error([&] { load_safetensors(path); },
               {"checkpoint '" + path + "' is corrupt", "tensor '" + tensor + "'" + what, "restore it from a backup"});
}

TEST(SafetensorsChecksum, DamagedDataIsCorruptNamingTheTensor) {
  TempDir dir;
  std::mt19937 rng(37);
  const std::vector<NamedTensor> tensors{random_tensor("conv1.weight", DType::F32, {4, 3, 3, 2}, rng),
                                         random_tensor("bn.running_mean", DType::F64, {4}, rng),
                                         random_tensor("mask", DType::U8, {3, 3}, rng)};
  save_safetensors(dir.file("good"), tensors, {{"epoch", "3"}});
  const std::vector<uint8_t> good = read_bytes(dir.file("good"));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t begin = data_offset(good, tensors, i), size = tensors[i].data.size();
    for (size_t at : {begin, begin + size / 2, begin + size - 1}) {  // one bit of its first, middle, last byte
      std::vector<uint8_t> bytes = good;
      bytes[at] ^= 0x01;
      write_bytes(dir.file("bad"), bytes);
      expect_corrupt(dir.file("bad"), tensors[i].name, " does not match the checksum written with it");
    }
  }
}

TEST(SafetensorsChecksum, DamagedHeaderIsAnError) {
  TempDir dir;
  std::mt19937 rng(38);
  save_safetensors(dir.file("good"), {random_tensor("w", DType::F32, {16}, rng)});
  const std::vector<uint8_t> good = read_bytes(dir.file("good"));
  const std::string header = header_text(good);
  auto flipped = [&](const std::string& part, size_t offset) {
    const size_t at = header.find(part);
    EXPECT_NE(at, std::string::npos) << part << " in " << header;
    std::vector<uint8_t> bytes = good;
    bytes[8 + at + offset] ^= 0x01;
    write_bytes(dir.file("bad"), bytes);
    return dir.file("bad");
  };
  expect_error([&] { load_safetensors(flipped("{", 0)); }, {"malformed JSON"});
  expect_error([&] { load_safetensors(flipped("[0,64]", 1)); }, {"tensor 'w'", "data_offsets"});
  // The checksum's first hex digit: another digit or none, either way not what was written.
  expect_error([&] { load_safetensors(flipped(R"("kiln.crc32.w":")", 16)); }, {"is corrupt", "tensor 'w'"});
  // The tensor's name in the checksum's key: 'w' becomes 'v'.
  expect_corrupt(flipped("kiln.crc32.w", 11), "v", ", which the file does not have");
}

TEST(SafetensorsChecksum, FilesWithoutChecksumsLoadUnverified) {
  TempDir dir;
  std::mt19937 rng(39);
  const std::vector<NamedTensor> tensors{random_tensor("a", DType::F32, {5}, rng),
                                         random_tensor("b", DType::I32, {2, 2}, rng)};
  const std::map<std::string, std::string> metadata{{"epoch", "2"}};
  const std::string path = dir.file("old");
  save_safetensors(path, tensors, metadata);
  drop_checksums(path);  // as older kiln versions wrote it
  EXPECT_EQ(header_text(read_bytes(path)).find("kiln.crc32"), std::string::npos);
  SafetensorsFile file = load_safetensors(path);
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(file.find("a")->data, tensors[0].data);
  EXPECT_EQ(file.find("b")->data, tensors[1].data);

  // No checksum, nothing to verify: damaged data is read as it is.
  std::vector<uint8_t> bytes = read_bytes(path);
  bytes[data_offset(bytes, tensors, 1)] ^= 0x01;
  write_bytes(path, bytes);
  file = load_safetensors(path);
  EXPECT_EQ(file.find("a")->data, tensors[0].data);
  EXPECT_NE(file.find("b")->data, tensors[1].data);

  // As PyTorch's safetensors writes one: its own metadata, no checksums.
  write_raw(dir.file("pt"),
            R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8);
  file = load_safetensors(dir.file("pt"));
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(file.find("w")->data, std::vector<std::byte>(8, std::byte(0x11)));
}

TEST(SafetensorsChecksum, SurviveSaveLoadSave) {
  TempDir dir;
  std::mt19937 rng(40);
  const std::vector<NamedTensor> tensors{random_tensor("w", DType::F32, {3, 3}, rng),
                                         random_tensor("half", DType::F16, {4}, rng),
                                         random_tensor("empty", DType::F32, {0}, rng)};
  const std::map<std::string, std::string> metadata{{"epoch", "1"}, {"zz", "last"}};
  save_safetensors(dir.file("first"), tensors, metadata);
  const std::string header = header_text(read_bytes(dir.file("first")));
  for (const NamedTensor& t : tensors)
    EXPECT_NE(header.find("\"kiln.crc32." + t.name + "\":\""), std::string::npos) << header;

  SafetensorsFile file = load_safetensors(dir.file("first"));
  EXPECT_EQ(file.metadata, metadata);  // the checksums were verified and are kiln's own
  save_safetensors(dir.file("second"), file.tensors, file.metadata);
  EXPECT_EQ(read_bytes(dir.file("second")), read_bytes(dir.file("first")));

  // Changed data gets a new checksum; one given for it in the metadata is replaced, not kept.
  file.tensors[0].data[0] ^= std::byte(0xFF);
  file.metadata["kiln.crc32.w"] = "00000000";
  file.metadata["kiln.crc32.gone"] = "12345678";
  save_safetensors(dir.file("third"), file.tensors, file.metadata);
  SafetensorsFile third = load_safetensors(dir.file("third"));
  EXPECT_EQ(third.find("w")->data, file.tensors[0].data);
  EXPECT_EQ(third.metadata, metadata);
}

TEST(Safetensors, SaveRejectsInconsistentTensorsAndKeepsOldFile) {
  TempDir dir;
  std::mt19937 rng(33);
  const std::string path = dir.file("ck");
  save_safetensors(path, {random_tensor("old", DType::F32, {3}, rng)});
  const std::vector<uint8_t> before = read_bytes(path);

  NamedTensor wrong = random_tensor("w", DType::F32, {3}, rng);
  wrong.data.pop_back();
  EXPECT_NE(error_of([&] { save_safetensors(path, {wrong}); }).find("'w'"), std::string::npos);
  NamedTensor a = random_tensor("a", DType::U8, {1}, rng);
  EXPECT_NE(error_of([&] { save_safetensors(path, {a, a}); }).find("twice"), std::string::npos);
  a.name = "__metadata__";
  EXPECT_NE(error_of([&] { save_safetensors(path, {a}); }).find("invalid tensor name"), std::string::npos);

  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(files_in(dir.path()), 1u);
}

TEST(Safetensors, SaveIntoMissingDirectoryLeavesNothing) {
  TempDir dir;
  std::mt19937 rng(34);
  const std::string path = dir.file("no/such/dir/ck.safetensors");
  std::string msg = error_of([&] { save_safetensors(path, {random_tensor("w", DType::F32, {2}, rng)}); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_EQ(files_in(dir.path()), 0u);
}

TEST(Safetensors, FailedRenameRemovesTheTemporary) {
  TempDir dir;
  std::mt19937 rng(35);
  std::filesystem::create_directories(dir.file("target/child"));  // a non-empty directory cannot be replaced
  std::string msg = error_of([&] { save_safetensors(dir.file("target"), {random_tensor("w", DType::F32, {2}, rng)}); });
  EXPECT_NE(msg.find("renaming"), std::string::npos) << msg;
  EXPECT_EQ(files_in(dir.path()), 1u);  // only the directory itself
  EXPECT_TRUE(std::filesystem::is_directory(dir.file("target/child")));
}

TEST(Safetensors, SaveOverExistingFileReplacesItCompletely) {
  TempDir dir;
  std::mt19937 rng(36);
  const std::string path = dir.file("ck");
  save_safetensors(path, {random_tensor("big", DType::F64, {1000}, rng)}, {{"epoch", "1"}});
  NamedTensor small = random_tensor("small", DType::U8, {3}, rng);
  save_safetensors(path, {small});
  SafetensorsFile file = load_safetensors(path);
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.tensors[0].name, "small");
  EXPECT_EQ(file.tensors[0].data, small.data);
  EXPECT_TRUE(file.metadata.empty());
  EXPECT_LT(std::filesystem::file_size(path), 200u);  // no leftovers of the 8,000 data bytes of the old file
  EXPECT_EQ(files_in(dir.path()), 1u);
}

}  // namespace
}  // namespace kiln
