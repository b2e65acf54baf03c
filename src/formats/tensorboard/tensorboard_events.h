#pragma once
// TensorBoard's event files, encoded: TFRecord records (uint64 length, masked CRC-32C of the
// length, the data, masked CRC-32C of the data; little-endian) each holding one tensorflow.Event
// protobuf (tensorflow/core/util/event.proto): wall_time (1, double), step (2, int64) and either
// file_version (3, string; the first record, "brain.Event:2") or a Summary (5) of Values, each a
// tag (1, string) and a simple_value (2, float) -- the scalars TensorBoard plots.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct TensorBoardScalar {
  std::string tag;
  float value = 0;
};

// The Event protobufs, serialized.
std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step, const std::vector<TensorBoardScalar>& values);

// `data` framed as one TFRecord record.
std::string tfrecord(const std::string& data);

}  // namespace kiln
