#pragma once
// Starting and supervising the ranks of one machine (`kiln train --gpus`): one process per GPU,
// each told who it is through torchrun's environment variables, and the first to fail stops
// the others so that a run never half-trains with a rank missing.
#include <string>
#include <utility>
#include <vector>

namespace kiln::dist {

struct LaunchSpec {
  std::vector<int> gpus;             // CUDA ordinals, one rank each on this machine
  std::vector<std::string> command;  // the program and arguments each rank runs (argv; PATH is searched)
  int nodes = 1, node_rank = 0;      // RANK = node_rank * gpus.size() + i, WORLD_SIZE = nodes * gpus.size()
  std::string master_addr = "127.0.0.1";
  int master_port = 0;               // 0: pick a free port (only valid with nodes == 1)
  double grace_seconds = 10;         // after a failure: SIGTERM the others, SIGKILL after this
};

struct LaunchResult {
  int exit_code = 0;   // 0 when every rank exited 0; else the first failure's status (128 + signal)
  std::string report;  // which rank failed first and how, and how the others ended
};

// Starts every rank of this machine with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, KILN_RANK_DEVICE (and NCCL_NVLS_ENABLE=0 unless set: NVLink multicast
// stays off on shared machines) added to this process's environment, sharing its stdout and
// stderr, and waits for all of them.
// - The first rank to exit non-zero or by a signal fails the run: the others get SIGTERM, and
//   SIGKILL once grace_seconds have passed; exit_code is the failed rank's.
// - SIGINT and SIGTERM sent to the launcher while it waits are passed on to every rank (handlers
//   installed for the call, the old ones put back after); the ranks then stop as they choose, and
//   their non-zero exits fail nothing.
// Each rank runs in a process group of its own, so that Ctrl-C in a terminal reaches a rank once
// (through the launcher) rather than twice (kiln train takes a second signal as "stop at once"),
// and so that stopping a rank stops whatever it started. A rank gets SIGTERM should the launcher
// die without stopping it. A kiln::Error when a rank cannot be started (the ones already started
// are stopped first).
LaunchResult launch_ranks(const LaunchSpec& spec);

// The GPU list of `--gpus`: "N" means 0..N-1, "a,b,c" the ordinals. A kiln::Error, naming the
// text and the fix, for an empty list, a count of 0, a negative or repeated ordinal, or garbage.
std::vector<int> parse_gpu_list(const std::string& text);

// A TCP port free on this machine now (bound at port 0 and read back; another program may take
// it before it is used, a window too small to matter for a launch).
int free_tcp_port();

// A kiln::Error naming the option (--gpus, --nodes, --node-rank, --master) when the spec cannot
// launch: no GPU or a bad ordinal, an empty command, nodes < 1, node_rank outside 0..nodes-1,
// several nodes without --master, a port outside 0..65535, a negative grace.
void check_launch_spec(const LaunchSpec& spec);

// The host and port of `--master HOST:PORT` ("[v6addr]:PORT" for an IPv6 address), checked.
std::pair<std::string, int> parse_master(const std::string& text);

}  // namespace kiln::dist
