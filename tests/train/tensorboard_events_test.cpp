// The pieces of TensorBoard's event files kiln writes by hand: CRC-32C against its published check
// values (RFC 3720's among them), the protobuf wire encoding against bytes worked out from the
// format's rules, and the TFRecord framing. tests/cli/tensorboard_plot_cli_test.cpp reads whole
// files back with TensorBoard's own reader.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "formats/crc32c.h"
#include "formats/proto_wire.h"
#include "formats/tensorboard/tensorboard_events.h"

namespace kiln {
namespace {

std::string bytes(std::initializer_list<int> values) {
  std::string s;
  for (int v : values) s.push_back(char(v));
  return s;
}

uint32_t crc_of(const std::string& s) { return crc32c(s.data(), s.size()); }

TEST(Crc32c, KnownCheckValues) {
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);  // the CRC catalogue's check value
  EXPECT_EQ(crc_of(""), 0u);
  // RFC 3720 (iSCSI), appendix B.4.
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc_of(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) up.push_back(char(i)), down.push_back(char(31 - i));
  EXPECT_EQ(crc_of(up), 0x46DD794Eu);
  EXPECT_EQ(crc_of(down), 0x113FDB5Cu);
  // A CRC carried on over a second piece is the CRC of both.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

TEST(Crc32c, MaskRotatesAndAddsTheConstant) {
  EXPECT_EQ(mask_crc32c(0), 0xa282ead8u);
  EXPECT_EQ(mask_crc32c(0x00008000u), 0xa282ead9u);  // bit 15 rotates to bit 0
  EXPECT_EQ(mask_crc32c(1), 0xa282ead8u + 0x00020000u);
}

TEST(ProtoWire, VarintsAndFieldsAsTheFormatDefinesThem) {
  std::string s;
  proto::put_varint(s, 1);
  EXPECT_EQ(s, bytes({0x01}));
  s.clear(), proto::put_varint(s, 150);
  EXPECT_EQ(s, bytes({0x96, 0x01}));
  s.clear(), proto::put_varint(s, 300);
  EXPECT_EQ(s, bytes({0xAC, 0x02}));
  s.clear(), proto::put_int64(s, 2, -1);  // key 0x10, then ten bytes of two's complement
  EXPECT_EQ(s, bytes({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));
  s.clear(), proto::put_double(s, 1, 1.0);
  EXPECT_EQ(s, bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F}));
  s.clear(), proto::put_float(s, 2, 1.0f);
  EXPECT_EQ(s, bytes({0x15, 0, 0, 0x80, 0x3F}));
  s.clear(), proto::put_bytes(s, 3, "ab");
  EXPECT_EQ(s, bytes({0x1A, 0x02, 'a', 'b'}));
}

TEST(TensorBoardEvents, EventsEncodeTheirFields) {
  // Event{wall_time 0.5, step 3, summary {value {tag "x", simple_value 1.0}}}.
  const std::string value = bytes({0x0A, 0x01, 'x', 0x15, 0, 0, 0x80, 0x3F});
  const std::string summary = bytes({0x0A, int(value.size())}) + value;
  const std::string expected =
      bytes({0x09, 0, 0, 0, 0, 0, 0, 0xE0, 0x3F, 0x10, 0x03, 0x2A, int(summary.size())}) + summary;
  EXPECT_EQ(scalars_event(0.5, 3, {{"x", 1.0f}}), expected);
  const std::string version = file_version_event(0.5);
  EXPECT_EQ(version.substr(11), bytes({0x1A, 13}) + "brain.Event:2");
}

TEST(TensorBoardEvents, RecordsAreFramedWithMaskedCrcs) {
  const std::string data = "event bytes";
  const std::string r = tfrecord(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(r.substr(0, 8), bytes({int(data.size()), 0, 0, 0, 0, 0, 0, 0}));
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(r[at + i])) << (8 * i);
    return v;
  };
  EXPECT_EQ(u32(8), mask_crc32c(crc32c(r.data(), 8)));
  EXPECT_EQ(r.substr(12, data.size()), data);
  EXPECT_EQ(u32(12 + data.size()), mask_crc32c(crc_of(data)));
}

}  // namespace
}  // namespace kiln
