#include "cli/data_parallel_settings.h"

#include <string>

#include "dist/launch_ranks.h"
#include "kiln/error.h"

namespace kiln::cli {
namespace {

// A text row's check from a parser that throws a kiln::Error naming the flag, the text and the fix
// (dist::parse_gpu_list, dist::parse_master): its message is the refusal.
template <class Parse>
std::string parse_refusal(Parse parse, const std::string& text) {
  try {
    parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

const std::vector<Setting>& data_parallel_settings() {
  using A = DataParallelArgs;
  static const std::vector<Setting> rows = [] {
    Setting gpus = text_setting<A>({.key = "gpus",
                                    .flag = "--gpus",
                                    .help = "data parallel: one process per GPU on this machine, each training batch "
                                            "--batch on its share of the data (the global batch is --batch times the "
                                            "ranks): a count (2: GPUs 0 and 1) or ordinals (0,2)",
                                    .member = "DataParallelArgs::gpus",
                                    .takes = "a count N, or ordinals a,b,..."},
                                   &A::gpus);
    gpus.check = [](const std::string& text) { return parse_refusal(dist::parse_gpu_list, text); };
    Setting master = text_setting<A>({.key = "master",
                                      .flag = "--master",
                                      .help = "HOST:PORT where rank 0 (on --node-rank 0) meets the others; needed with "
                                              "--nodes > 1",
                                      .member = "DataParallelArgs::master",
                                      .takes = "HOST:PORT"},
                                     &A::master);
    master.check = [](const std::string& text) { return parse_refusal(dist::parse_master, text); };
    return std::vector<Setting>{
        gpus,
        count_setting<A>({.key = "nodes",
                          .flag = "--nodes",
                          .help = "data parallel over machines: how many, each started with the same --gpus",
                          .member = "DataParallelArgs::nodes",
                          .fix = "use e.g. --nodes 2"},
                         &A::nodes, {1, kUnbounded}),
        count_setting<A>({.key = "node_rank",
                          .flag = "--node-rank",
                          .help = "this machine's place among --nodes, from 0 (0 runs rank 0)",
                          .member = "DataParallelArgs::node_rank",
                          .fix = "use e.g. --node-rank 0"},
                         &A::node_rank, {0, kUnbounded}),
        master,
        real_setting<A>({.key = "join_timeout",
                         .flag = "--join-timeout",
                         .help = "seconds the ranks wait for each other to start (default 300)",
                         .member = "DataParallelArgs::join_timeout",
                         .fix = "use e.g. --join-timeout 300"},
                        &A::join_timeout, {0, kUnbounded, true, false}),
        real_setting<A>({.key = "rank_timeout",
                         .flag = "--rank-timeout",
                         .help = "data parallel: a rank that sees no training progress for this many seconds stops "
                                 "the run (a peer hangs); 0 never (default 600)",
                         .member = "TrainOptions::rank_timeout",
                         .fix = "use e.g. --rank-timeout 600"},
                        &A::rank_timeout, {0, kUnbounded}),
    };
  }();
  return rows;
}

const Setting& data_parallel_setting(const char* key) {
  const Setting* row = find_setting(data_parallel_settings(), key);
  if (!row) fail("internal: no data-parallel setting '{}'", key);
  return *row;
}

bool launches_ranks(const Setting& row) {
  const std::string key = row.info.key;
  return key == "gpus" || key == "nodes" || key == "node_rank" || key == "master";
}

}  // namespace kiln::cli
