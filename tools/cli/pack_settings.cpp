#include "cli/pack_settings.h"

namespace kiln::cli {

const std::vector<Setting>& pack_settings() {
  using A = PackCommandArgs;
  // The ranges and fixes of the hand-written flags: a JPEG's side is at most 65500 pixels and its
  // quality 1 to 100.
  static const std::vector<Setting> rows = {
      count_setting<A>({.key = "max_side",
                        .flag = "--max-side",
                        .help = "images are stored with their longer side at most this (larger ones are downscaled "
                                "and re-encoded), in [1, 65500]",
                        .member = "PackCommandArgs::max_side",
                        .fix = "use e.g. --max-side 512"},
                       &A::max_side, {1, 65500}),
      count_setting<A>({.key = "quality",
                        .flag = "--quality",
                        .help = "JPEG quality of re-encoded images, in [1, 100]",
                        .member = "PackCommandArgs::quality",
                        .fix = "use e.g. --quality 90"},
                       &A::quality, {1, 100}),
      count_setting<A>({.key = "shard_mb",
                        .flag = "--shard-mb",
                        .help = "shard size in MB (2^20 bytes), in [1, 1048576]",
                        .member = "PackCommandArgs::shard_mb",
                        .fix = "use e.g. --shard-mb 256"},
                       &A::shard_mb, {1, 1 << 20}),
      count_setting<A>({.key = "workers",
                        .flag = "--workers",
                        .help = "decode/encode threads, in [0, 4096] (0: all cores)",
                        .member = "PackCommandArgs::workers",
                        .fix = "use e.g. --workers 8, or 0 for all cores"},
                       &A::workers, {0, 4096}),
      switch_setting<A>({.key = "skip_bad",
                         .flag = "--skip-bad",
                         .help = "leave out images that cannot be decoded (truncated, corrupt, not JPEG/PNG) and list "
                                 "them at the end; without it the first one stops the pack, named",
                         .member = "PackCommandArgs::skip_bad",
                         .flag_only = true},
                        &A::skip_bad),
  };
  return rows;
}

}  // namespace kiln::cli
