#include "cli/pack_command.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>

#include "cli/pack_settings.h"
#include "cli/setting_options.h"
#include "data/pack/pack_writer.h"
#include "kiln/threads.h"

namespace kiln::cli {

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
  // Its flags (cli/pack_settings.h): --max-side, --quality, --shard-mb, --workers, --skip-bad.
  add_setting_options(cmd, pack_settings(), a);
  cmd->get_option("--workers")->default_str("0 (all cores)");
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
