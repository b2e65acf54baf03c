// The SHA-256 an imported file is known by (src/import/sha256.h): FIPS 180-4's examples, and
// messages whose padding falls on each side of a block's end (55, 56, 63, 64, 65, 119, 120 bytes:
// the length field fits in the last block or needs another), against Python's hashlib.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "import/sha256.h"

namespace kiln {
namespace {

std::string sha(const std::string& text) {
  return sha256_hex({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingAtEveryBlockEdge) {
  const std::vector<std::pair<size_t, const char*>> hashlib = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"}};
  for (const auto& [n, want] : hashlib) EXPECT_EQ(sha(std::string(n, 'a')), want) << n << " bytes";
  // Every byte value, three times (hashlib.sha256(bytes(range(256)) * 3)).
  std::string all;
  for (int r = 0; r < 3; ++r)
    for (int b = 0; b < 256; ++b) all += char(b);
  EXPECT_EQ(sha(all), "f3a25aa93aa2fbba28d79260535bbd6a5eb0fc1c24a8b0f04e12b484c1dfe363");
}

}  // namespace
}  // namespace kiln
