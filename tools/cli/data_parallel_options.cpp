#include "cli/data_parallel_options.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cli/data_options.h"
#include "cli/option_checks.h"
#include "dist/launch_ranks.h"
#include "kiln/error.h"

namespace kiln::cli {

void add_data_parallel_options(CLI::App* app, DataParallelArgs& a, bool train) {
  app->add_option("--gpus", a.gpus,
                  "data parallel: one process per GPU on this machine, each training batch --batch on its share of "
                  "the data (the global batch is --batch times the ranks): a count (2: GPUs 0 and 1) or ordinals "
                  "(0,2)")
      ->type_name("N|LIST")
      ->check(parsed_by([](const std::string& text) { dist::parse_gpu_list(text); }));
  app->add_option("--nodes", a.nodes, "data parallel over machines: how many, each started with the same --gpus")
      ->check(at_least(1, "use e.g. --nodes 2"));
  app->add_option("--node-rank", a.node_rank, "this machine's place among --nodes, from 0 (0 runs rank 0)")
      ->check(at_least(0, "use e.g. --node-rank 0"));
  app->add_option("--master", a.master,
                  "HOST:PORT where rank 0 (on --node-rank 0) meets the others; needed with --nodes > 1")
      ->type_name("HOST:PORT")
      ->check(parsed_by([](const std::string& text) { dist::parse_master(text); }));
  app->add_option("--join-timeout", a.join_timeout, "seconds the ranks wait for each other to start (default 300)")
      ->check(number_in([](double v) { return v > 0; }, "> 0", "use e.g. --join-timeout 300"));
  if (train)
    app->add_option("--rank-timeout", a.rank_timeout,
                    "data parallel: a rank that sees no training progress for this many seconds stops the run (a "
                    "peer hangs); 0 never (default 600)")
        ->check(number_in([](double v) { return v >= 0; }, ">= 0", "use e.g. --rank-timeout 600"));
}

std::vector<std::string> rank_command(const std::vector<std::string>& argv) {
  static const char* const launch_options[] = {"--gpus", "--nodes", "--node-rank", "--master"};
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    bool dropped = false;
    for (const char* o : launch_options) {
      const std::string name = o;
      if (argv[i] == name) {
        ++i;  // and its value
        dropped = true;
      } else if (argv[i].rfind(name + "=", 0) == 0) {
        dropped = true;
      }
      if (dropped) break;
    }
    if (!dropped) out.push_back(argv[i]);
  }
  return out;
}

std::optional<int> launch_ranks_if_asked(const DataParallelArgs& a, const std::vector<std::string>& argv) {
  if (a.gpus.empty()) {
    if (a.nodes > 1 || a.node_rank > 0 || !a.master.empty())
      fail("--nodes, --node-rank and --master start data-parallel ranks, which --gpus names; add --gpus N");
    return std::nullopt;
  }
  if (std::getenv("WORLD_SIZE") != nullptr) return std::nullopt;  // a rank of a launch already
  dist::LaunchSpec spec;
  spec.gpus = dist::parse_gpu_list(a.gpus);
  spec.nodes = a.nodes, spec.node_rank = a.node_rank;
  if (!a.master.empty()) std::tie(spec.master_addr, spec.master_port) = dist::parse_master(a.master);
  spec.command = rank_command(argv);
  // The ranks run this very program, whatever name it was started by.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) spec.command[0] = std::string(self, size_t(n));
  dist::check_launch_spec(spec);
  if (spec.master_port == 0) spec.master_port = dist::free_tcp_port();
  std::fflush(stdout);
  const dist::LaunchResult r = dist::launch_ranks(spec);
  if (r.exit_code != 0) std::fprintf(stderr, "kiln: error: %s\n", r.report.c_str());
  return r.exit_code;
}

std::shared_ptr<ProcessGroup> join_ranks_if_launched(const DataParallelArgs& a, CompileOptions& c) {
  const std::optional<RankEnv> env = rank_env_from_environment();
  if (!env) return nullptr;
  if (c.device == Device::CPU)
    fail("rank {} of {}: data-parallel training runs on GPUs; use --device cuda", env->rank, env->ranks);
  c.device = Device::CUDA, c.device_index = env->device;
  c.data_parallel = join_process_group(*env, a.join_timeout);
  // One voice: rank 0 prints the run's progress and results; every rank's errors still reach stderr.
  if (env->rank != 0 && std::freopen("/dev/null", "w", stdout) == nullptr)
    fail("rank {}: cannot silence its standard output", env->rank);
  return c.data_parallel;
}

}  // namespace kiln::cli
