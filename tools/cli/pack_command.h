#pragma once
// `kiln pack SRC OUT`: an image folder as a kiln pack (large shards of JPEG records with an index,
// a checksum per record and each record's source file, read through mmap; the format is in
// src/data/pack/pack_writer.h). Every image is decoded before it is packed.
#include <CLI/CLI.hpp>

#include <string>

namespace kiln::cli {

// Its fields but SRC and OUT (positionals) are rows of cli/pack_settings.h, which give them their flags.
struct PackCommandArgs {
  std::string source, out;
  int max_side = 512, quality = 90, shard_mb = 256;
  int workers = 0;  // 0: all cores
  bool skip_bad = false;
};

CLI::App* add_pack_command(CLI::App& app, PackCommandArgs& args);
int run_pack(const PackCommandArgs& args);

}  // namespace kiln::cli
