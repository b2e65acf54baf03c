#include "formats/tensorboard/tensorboard_events.h"

#include "formats/crc32c.h"
#include "formats/proto_wire.h"

namespace kiln {
namespace {

// Field numbers of event.proto and summary.proto.
enum EventField { kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5 };
enum SummaryField { kValue = 1 };
enum ValueField { kTag = 1, kSimpleValue = 2 };

std::string event_head(double wall_time, int64_t step) {
  std::string e;
  proto::put_double(e, kWallTime, wall_time);
  proto::put_int64(e, kStep, step);
  return e;
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xFF));
}

}  // namespace

std::string file_version_event(double wall_time) {
  std::string e = event_head(wall_time, 0);
  proto::put_bytes(e, kFileVersion, "brain.Event:2");
  return e;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<TensorBoardScalar>& values) {
  std::string summary;
  for (const TensorBoardScalar& v : values) {
    std::string value;
    proto::put_bytes(value, kTag, v.tag);
    proto::put_float(value, kSimpleValue, v.value);
    proto::put_bytes(summary, kValue, value);
  }
  std::string e = event_head(wall_time, step);
  proto::put_bytes(e, kSummary, summary);
  return e;
}

std::string tfrecord(const std::string& data) {
  std::string length;
  const uint64_t n = data.size();
  for (int i = 0; i < 8; ++i) length.push_back(char((n >> (8 * i)) & 0xFF));
  std::string record = length;
  put_u32(record, mask_crc32c(crc32c(length.data(), length.size())));
  record += data;
  put_u32(record, mask_crc32c(crc32c(data.data(), data.size())));
  return record;
}

}  // namespace kiln
