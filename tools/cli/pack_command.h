#pragma once
// `kiln pack SRC OUT`: an image folder as a kiln pack (large shards of JPEG records with an index
// and a checksum per record, read through mmap; the format is in src/data/pack/pack_writer.h).
#include <CLI/CLI.hpp>

#include <string>

namespace kiln::cli {

struct PackCommandArgs {
  std::string source, out;
  int max_side = 512, quality = 90, shard_mb = 256;
  int workers = 0;  // 0: all cores
};

CLI::App* add_pack_command(CLI::App& app, PackCommandArgs& args);
int run_pack(const PackCommandArgs& args);

}  // namespace kiln::cli
