#include "cli/pack_command.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>

#include "data/pack/pack_writer.h"
#include "kiln/threads.h"

namespace kiln::cli {
namespace {

// A whole number in [lo, hi], else a message with the range and a value to use.
CLI::Validator whole_in(int64_t lo, int64_t hi, std::string fix) {
  return CLI::Validator(
      [lo, hi, fix](std::string& text) -> std::string {
        int64_t v = 0;
        if (!CLI::detail::lexical_cast(text, v))
          return fmt::format("'{}' is not a whole number; {}", text, fix);
        if (v < lo || v > hi) return fmt::format("{} is out of range: it must be in [{}, {}]; {}", text, lo, hi, fix);
        return {};
      },
      "", "");
}

}  // namespace

CLI::App* add_pack_command(CLI::App& app, PackCommandArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "pack", "pack an image folder into a kiln pack: large shards of JPEG records, read through mmap when training "
              "(--data OUT)");
  cmd->add_option("SRC", a.source,
                  "image folder: train/ and val/ holding one subfolder per class, or the class subfolders directly "
                  "(then a training split only)")
      ->required()
      ->type_name("DIR");
  cmd->add_option("OUT", a.out, "the pack folder to create; it must not exist (kiln pack never overwrites)")
      ->required()
      ->type_name("DIR");
  cmd->add_option("--max-side", a.max_side,
                  "images are stored with their longer side at most this (larger ones are downscaled and "
                  "re-encoded), in [1, 65500]")
      ->check(whole_in(1, 65500, "use e.g. --max-side 512"));
  cmd->add_option("--quality", a.quality, "JPEG quality of re-encoded images, in [1, 100]")
      ->check(whole_in(1, 100, "use e.g. --quality 90"));
  cmd->add_option("--shard-mb", a.shard_mb, "shard size in MB (2^20 bytes), in [1, 1048576]")
      ->check(whole_in(1, 1 << 20, "use e.g. --shard-mb 256"));
  cmd->add_option("--workers", a.workers, "decode/encode threads, in [0, 4096] (0: all cores)")
      ->check(whole_in(0, 4096, "use e.g. --workers 8, or 0 for all cores"))
      ->default_str("0 (all cores)");
  cmd->add_flag("--skip-bad", a.skip_bad,
                "leave out images that cannot be decoded (truncated, corrupt, not JPEG/PNG) and list them at the end; "
                "without it the first one stops the pack, named");
  return cmd;
}

int run_pack(const PackCommandArgs& a) {
  PackOptions o;
  o.max_side = a.max_side;
  o.quality = a.quality;
  o.shard_bytes = int64_t(a.shard_mb) << 20;
  o.workers = a.workers;
  o.progress = true;
  o.skip_bad = a.skip_bad;
  const int threads = o.workers > 0 ? o.workers : available_cores();
  fmt::print("kiln pack: '{}' -> '{}' (max side {}, quality {}, shards of {} MB, {} thread{}{}); every image is "
             "decoded to check it\n", a.source, a.out, o.max_side, o.quality, a.shard_mb, threads,
             threads == 1 ? "" : "s", o.skip_bad ? ", --skip-bad" : "");
  std::fflush(stdout);
  write_pack(a.source, a.out, o);
  return 0;
}

}  // namespace kiln::cli
