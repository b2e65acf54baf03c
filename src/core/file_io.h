#pragma once
// Whole-file reads with helpful errors, and crash-safe whole-file writes.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kiln {

// Reads all of `path`. A missing or unreadable file throws kiln::Error naming the file;
// `hint` (may be empty) is appended to say how to obtain it.
std::vector<uint8_t> read_file_bytes(const std::string& path, const std::string& hint);

// Writes the concatenation of `chunks` to "<path>.tmp.<pid>", fsyncs it and renames it over
// `path`, so `path` always holds either the old or the complete new content. On any failure
// the temporary file is removed, the old file is untouched, and kiln::Error names the path.
void write_file_atomic(const std::string& path, const std::vector<std::span<const std::byte>>& chunks);

}  // namespace kiln
