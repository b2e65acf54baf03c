// The stored inputs of the fuzz targets (fuzz/corpus/<target>/: seeds, a sample of what libFuzzer
// found interesting, and every input that once crashed, as crash-* files), replayed through the
// same entry points the libFuzzer executables use (fuzz/fuzz_support.h). Each must end in success
// or a kiln::Error: a crash, a sanitizer report or another exception fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>

#include "fuzz_support.h"

namespace kiln::fuzz {

// gtest names the parameter by this (else by its bytes, which differ from build to build).
void PrintTo(const Target& target, std::ostream* out) { *out << target.name; }

namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

class FuzzCorpus : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzCorpus, EveryStoredInputSucceedsOrThrowsKilnError) {
  const Target& target = GetParam();
  const fs::path dir = fs::path(KILN_SOURCE_DIR) / "fuzz" / "corpus" / target.name;
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << dir << " holds no inputs";
  for (const fs::path& file : files) {
    const std::vector<uint8_t> bytes = read_all(file);
    SCOPED_TRACE(file.string());
    EXPECT_NO_THROW(target.entry(Bytes(bytes.data(), bytes.size())));
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus, ::testing::ValuesIn(kTargets),
                         [](const ::testing::TestParamInfo<Target>& info) { return std::string(info.param.name); });

// The multi-file inputs split where the harness says.
TEST(FuzzSupport, PartsSplitAtTheSeparatorAndJoinBack) {
  const std::vector<std::vector<uint8_t>> parts = {{1, 2}, {}, {3}};
  const std::vector<uint8_t> joined = join_parts(parts);
  const std::vector<Bytes> split = split_parts(Bytes(joined.data(), joined.size()), 8);
  ASSERT_EQ(split.size(), 3u);
  for (size_t i = 0; i < parts.size(); ++i)
    EXPECT_TRUE(std::equal(split[i].begin(), split[i].end(), parts[i].begin(), parts[i].end()));
  EXPECT_EQ(split_parts(Bytes(joined.data(), joined.size()), 2).size(), 2u);  // the rest stays in the last
}

}  // namespace
}  // namespace kiln::fuzz
