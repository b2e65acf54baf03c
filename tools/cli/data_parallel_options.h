#pragma once
// `kiln train` and `kiln bench` on several GPUs. The command a user types (with --gpus) is the
// launcher: it starts one rank per GPU running the same command line without the launch options,
// each told who it is through the environment (RANK, WORLD_SIZE, ... as torchrun does), and
// supervises them. A rank process joins the others over NCCL and trains its share.
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data_parallel.h"
#include "kiln/options.h"

namespace kiln::cli {

struct DataParallelArgs {
  std::string gpus;        // --gpus N | a,b,c: one rank per GPU on this machine; empty: no launch
  int nodes = 1;           // --nodes: machines, each running this launcher with the same --gpus
  int node_rank = 0;       // --node-rank: this machine's place among them
  std::string master;      // --master HOST:PORT: rank 0's machine (nodes > 1); one machine picks a port
  float rank_timeout = 600;  // --rank-timeout (train): the watchdog's seconds, 0 off
  float join_timeout = 300;  // --join-timeout: how long the ranks wait for each other to start
};

// --gpus, --nodes, --node-rank, --master, --join-timeout; with `train`, --rank-timeout too: the
// flags of the rows of cli/data_parallel_settings.h.
void add_data_parallel_options(CLI::App* app, DataParallelArgs& a, bool train);

// In the process a user started with --gpus: starts the ranks with `argv` less the launch options
// and returns the exit code the launcher ends with (0 when every rank succeeded; else the first
// failure's, named on stderr). nullopt when this process is not a launcher (no --gpus, or it is a
// rank already: WORLD_SIZE is set).
std::optional<int> launch_ranks_if_asked(const DataParallelArgs& a, const std::vector<std::string>& argv);

// In a rank (WORLD_SIZE in the environment): joins the others and sets `c` for this rank's GPU
// (device CUDA, its ordinal, the group); ranks other than 0 print nothing to stdout from then on.
// Alone, leaves `c` as it is and returns nullptr.
std::shared_ptr<ProcessGroup> join_ranks_if_launched(const DataParallelArgs& a, CompileOptions& c);

// The command line a rank runs: `argv` without --gpus, --nodes, --node-rank and --master (the
// rows that launch ranks) and their values, in either "--opt v" or "--opt=v" form.
std::vector<std::string> rank_command(const std::vector<std::string>& argv);

}  // namespace kiln::cli
