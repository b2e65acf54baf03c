#include "cli/data_parallel_options.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cli/data_parallel_settings.h"
#include "cli/setting_options.h"
#include "dist/launch_ranks.h"
#include "kiln/error.h"

namespace kiln::cli {

void add_data_parallel_options(CLI::App* app, DataParallelArgs& a, bool train) {
  for (const Setting& row : data_parallel_settings())
    if (train || std::string(row.info.key) != "rank_timeout") add_setting_option(app, row, a);
  app->get_option("--gpus")->type_name("N|LIST");
  app->get_option("--master")->type_name("HOST:PORT");
}

std::vector<std::string> rank_command(const std::vector<std::string>& argv) {
  std::vector<std::string> launch_flags;
  for (const Setting& row : data_parallel_settings())
    if (launches_ranks(row)) launch_flags.push_back(row.info.flag);
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    bool dropped = false;
    for (const std::string& name : launch_flags) {
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
