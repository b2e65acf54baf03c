#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "support/temp_dir.h"
#include "kiln/checkpoint.h"
#include "kiln/error.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

NamedTensor random_tensor(const std::string& name, DType dtype, Shape shape, std::mt19937& rng) {
  NamedTensor t{name, dtype, shape, std::vector<std::byte>(numel(shape) * dtype_size(dtype))};
  for (std::byte& b : t.data) b = std::byte(rng());
  return t;
}

// A file assembled by hand: header length, header text (padded to 8), data.
void write_raw(const std::string& path, std::string header, size_t data_bytes) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(uint8_t(uint64_t(header.size()) >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.resize(bytes.size() + data_bytes, 0x11);
  write_bytes(path, bytes);
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

  const std::string json = R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
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

  // Without metadata there is no "__metadata__" key at all.
  save_safetensors(dir.file("u"), {t});
  bytes = read_bytes(dir.file("u"));
  ASSERT_EQ(bytes.size(), 8u + 56u + 8u);  // 54 JSON bytes padded to 56
  EXPECT_EQ(std::string(bytes.begin() + 8, bytes.begin() + 8 + 56),
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}  )");
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
  EXPECT_LT(std::filesystem::file_size(path), 100u);  // no leftovers of the larger old file
  EXPECT_EQ(files_in(dir.path()), 1u);
}

}  // namespace
}  // namespace kiln
