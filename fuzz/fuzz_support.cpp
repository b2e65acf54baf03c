#include "fuzz_support.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace kiln::fuzz {
namespace fs = std::filesystem;

void check_failed(const char* condition, const char* file, int line) {
  throw FuzzCheckFailed(fmt::format("{}:{}: the result breaks its contract: {}", file, line, condition));
}

std::vector<Bytes> split_parts(Bytes input, size_t max_parts) {
  std::vector<Bytes> parts;
  const auto* sep = reinterpret_cast<const uint8_t*>(kSeparator.data());
  while (parts.size() + 1 < max_parts) {
    const auto at = std::search(input.begin(), input.end(), sep, sep + kSeparator.size());
    if (at == input.end()) break;
    const size_t n = size_t(at - input.begin());
    parts.push_back(input.first(n));
    input = input.subspan(n + kSeparator.size());
  }
  parts.push_back(input);
  return parts;
}

std::vector<uint8_t> join_parts(const std::vector<std::vector<uint8_t>>& parts) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out.insert(out.end(), kSeparator.begin(), kSeparator.end());
    out.insert(out.end(), parts[i].begin(), parts[i].end());
  }
  return out;
}

namespace {

struct Scratch {
  std::string path;
  Scratch() {
    std::error_code ec;
    const fs::path base = fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0
                              ? fs::path("/dev/shm")
                              : fs::temp_directory_path();
    path = (base / fmt::format("kiln-fuzz-{}", ::getpid())).string();
    fs::remove_all(path, ec);
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

const std::string& scratch_dir() {
  static const Scratch scratch;
  return scratch.path;
}

std::string write_scratch(const std::string& name, Bytes bytes) {
  const std::string path = (fs::path(scratch_dir()) / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  out.close();
  if (!out) throw std::runtime_error("fuzz harness: cannot write " + path);
  return path;
}

void clear_scratch() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(scratch_dir(), ec)) fs::remove_all(entry.path(), ec);
}

}  // namespace kiln::fuzz
