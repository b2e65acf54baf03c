#pragma once
// What the fuzz targets of fuzz/ share: their entry points (one per target, each in its own
// <target>_fuzz.cpp), the rule every one asserts, an input cut into several files, and a scratch
// folder on tmpfs for the readers that take paths.
//
// The rule: whatever the bytes, a kiln reader either succeeds, and what it returns is consistent
// (sizes, ranges: each target checks its own), or throws kiln::Error. Any other exception, a crash,
// a sanitizer report (ASan, UBSan), a leak or a hang is a finding. An entry point returns normally
// after success or a kiln::Error, throws FuzzCheckFailed when a result is inconsistent and lets
// every other exception through: libFuzzer reports both as a crash (std::terminate), the
// regression test (tests/fuzz_regression/) as a failed test.
//
// Each <target>_fuzz.cpp defines LLVMFuzzerTestOneInput (the libFuzzer executable kiln_fuzz_<target>,
// cmake/fuzz.cmake) unless KILN_FUZZ_NO_MAIN is defined: the library kiln_fuzz_entries holds the
// entry points alone, for the regression test to replay fuzz/corpus/<target>/ in the CPU suite.
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/error.h"

namespace kiln::fuzz {

using Bytes = std::span<const uint8_t>;

// The entry points, by target name (fuzz/corpus/<name>/, kiln_fuzz_<name>).
void idx_input(Bytes input);
void cifar10_input(Bytes input);
void safetensors_input(Bytes input);
void cli_options_input(Bytes input);
void image_decode_input(Bytes input);
void pack_input(Bytes input);
void folder_scan_input(Bytes input);
void onnx_import_input(Bytes input);

struct Target {
  const char* name;
  void (*entry)(Bytes);
};
inline constexpr Target kTargets[] = {
    {"idx", idx_input},
    {"cifar10", cifar10_input},
    {"safetensors", safetensors_input},
    {"cli_options", cli_options_input},
    {"image_decode", image_decode_input},
    {"pack", pack_input},
    {"folder_scan", folder_scan_input},
    {"onnx_import", onnx_import_input},
};

// A result that breaks what the reader promises (a size that disagrees with the data, a value out
// of range).
class FuzzCheckFailed : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};
[[noreturn]] void check_failed(const char* condition, const char* file, int line);
#define KILN_FUZZ_CHECK(condition) \
  ((condition) ? (void)0 : ::kiln::fuzz::check_failed(#condition, __FILE__, __LINE__))

// Runs `body`; a kiln::Error is an accepted outcome (the reader refused the input).
template <class F>
void accept_kiln_errors(F&& body) {
  try {
    body();
  } catch (const kiln::Error&) {
  }
}

// Files packed into one input: the parts between occurrences of kSeparator (at most `max_parts`; the
// last part keeps any further separators). libFuzzer's mutations then change one file at a time,
// and can add or drop a file.
inline constexpr std::string_view kSeparator = "#KILN-FUZZ-PART#";
std::vector<Bytes> split_parts(Bytes input, size_t max_parts);
// The inverse, to make seeds.
std::vector<uint8_t> join_parts(const std::vector<std::vector<uint8_t>>& parts);

// A folder of this process, created on first use under /dev/shm (tmpfs: a file per execution costs
// no disk) or else the system's temporary folder, and removed at exit.
const std::string& scratch_dir();
// Writes `bytes` to scratch_dir()/name, replacing it; returns the path.
std::string write_scratch(const std::string& name, Bytes bytes);
// Removes every file of scratch_dir() (a target whose inputs are several files starts each
// execution from an empty folder, so no file of the previous input is read).
void clear_scratch();

// Little helpers to draw parameters from the first bytes of an input.
class ByteReader {
 public:
  explicit ByteReader(Bytes bytes) : bytes_(bytes) {}
  uint8_t u8() { return at_ < bytes_.size() ? bytes_[at_++] : 0; }
  uint16_t u16() { return uint16_t(u8() | (u8() << 8)); }
  Bytes rest() const { return bytes_.subspan(std::min(at_, bytes_.size())); }

 private:
  Bytes bytes_;
  size_t at_ = 0;
};

}  // namespace kiln::fuzz

// The libFuzzer entry of a target's executable.
#ifndef KILN_FUZZ_NO_MAIN
#define KILN_FUZZ_TARGET(entry)                                                 \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {     \
    ::kiln::fuzz::entry(::kiln::fuzz::Bytes(data, size));                       \
    return 0;                                                                   \
  }
#else
#define KILN_FUZZ_TARGET(entry)
#endif
