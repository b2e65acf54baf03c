#pragma once
// A TensorBoard event file being written (`kiln train --tensorboard DIR`): scalars by step, each
// event written through to the file as it comes, so a run killed midway leaves every event before.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/tensorboard/tensorboard_events.h"

namespace kiln {

class TensorBoardWriter {
 public:
  // Makes `dir` (and its parents) when missing and a new file in it named as TensorBoard's own
  // writers name theirs, events.out.tfevents.<10-digit seconds>.<host>, then writes the
  // file_version record. An existing file is never replaced: a second run in the same second gets
  // the name with ".1", ".2", ... appended. kiln::Error naming the folder or file when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event at `step` holding `values`, stamped with the wall clock. kiln::Error naming the file
  // when it cannot be written (a full disk).
  void scalars(int64_t step, const std::vector<TensorBoardScalar>& values);
  const std::string& path() const { return path_; }
  // The constructor's first check, for callers that want it before any work: `dir` is not a file.
  static void check_folder(const std::string& dir);

 private:
  void write_record(const std::string& event);
  std::string path_;
  int fd_ = -1;
};

}  // namespace kiln
