// Where this process stands among the ranks, read from the environment a launcher (kiln train
// --gpus, or torchrun) sets. The defaults, for what a launcher may leave out:
// - LOCAL_RANK: RANK, as if every rank ran on this machine (torchrun always sets it; a hand-made
//   one-machine launch need not).
// - KILN_RANK_DEVICE: LOCAL_RANK, torchrun's convention of one GPU per local rank.
// - MASTER_ADDR: 127.0.0.1; MASTER_PORT: needed once there are two ranks, else 0.
// A variable set to the empty string counts as unset, so `VAR=` clears it as a shell user expects.
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>

#include "kiln/data_parallel.h"
#include "kiln/error.h"

namespace kiln {
namespace {

// Every error ends with this: the variables come from the launcher, which is what to fix.
constexpr const char* kLauncherHint = "(kiln train --gpus or torchrun sets these variables)";

std::optional<std::string> variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int integer_variable(const char* name, const std::string& text, const char* meaning) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [used, error] = std::from_chars(text.data(), end, value);
  if (error == std::errc::result_out_of_range)
    fail("environment variable {}='{}' is out of range; set {} to {} {}", name, text, name, meaning, kLauncherHint);
  if (error != std::errc() || used != end)
    fail("environment variable {}='{}' is not an integer; set {} to {} {}", name, text, name, meaning,
         kLauncherHint);
  return value;
}

// An integer variable that may be left out (then `fallback`).
int integer_variable_or(const char* name, int fallback, const char* meaning) {
  const std::optional<std::string> text = variable(name);
  return text ? integer_variable(name, *text, meaning) : fallback;
}

}  // namespace

std::optional<RankEnv> rank_env_from_environment() {
  const std::optional<std::string> world_text = variable("WORLD_SIZE");
  if (!world_text) return std::nullopt;
  RankEnv env;
  env.ranks = integer_variable("WORLD_SIZE", *world_text, "the number of ranks, e.g. 2");
  if (env.ranks < 1)
    fail("environment variable WORLD_SIZE={} counts no rank; set it to the number of ranks (1 or more), or unset it "
         "to train alone {}", env.ranks, kLauncherHint);

  const std::optional<std::string> rank_text = variable("RANK");
  if (!rank_text)
    fail("environment variable WORLD_SIZE={} is set but RANK is not; set RANK to this process's rank, 0 to {} {}",
         env.ranks, env.ranks - 1, kLauncherHint);
  env.rank = integer_variable("RANK", *rank_text, "this process's rank, from 0");
  if (env.rank < 0 || env.rank >= env.ranks)
    fail("environment variable RANK={} is outside 0 to {} (WORLD_SIZE={}); set RANK to this process's rank below "
         "WORLD_SIZE {}", env.rank, env.ranks - 1, env.ranks, kLauncherHint);

  env.local_rank = integer_variable_or("LOCAL_RANK", env.rank, "this process's rank on its machine, from 0");
  if (env.local_rank < 0 || env.local_rank >= env.ranks)
    fail("environment variable LOCAL_RANK={} is outside 0 to {} (WORLD_SIZE={}); set LOCAL_RANK to this process's "
         "rank among those on its machine {}", env.local_rank, env.ranks - 1, env.ranks, kLauncherHint);

  env.device = integer_variable_or("KILN_RANK_DEVICE", env.local_rank, "the CUDA ordinal this rank trains on");
  if (env.device < 0)
    fail("environment variable KILN_RANK_DEVICE={} is negative; set it to the CUDA ordinal of this rank's GPU (0 or "
         "more), or unset it to use LOCAL_RANK={}", env.device, env.local_rank);

  if (const std::optional<std::string> addr = variable("MASTER_ADDR")) env.master_addr = *addr;

  const std::optional<std::string> port_text = variable("MASTER_PORT");
  if (port_text) {
    env.master_port = integer_variable("MASTER_PORT", *port_text, "rank 0's TCP port, 1 to 65535");
    if (env.master_port < 1 || env.master_port > 65535)
      fail("environment variable MASTER_PORT={} is not a TCP port; set it to rank 0's port, 1 to 65535 (e.g. 29500) "
           "{}", env.master_port, kLauncherHint);
  } else if (env.ranks > 1) {
    fail("environment variable MASTER_PORT is not set, but WORLD_SIZE={} ranks must meet at rank 0's port; set "
         "MASTER_PORT to a free TCP port on rank 0's machine (MASTER_ADDR={}), the same on every rank, e.g. 29500 {}",
         env.ranks, env.master_addr, kLauncherHint);
  }
  return env;
}

}  // namespace kiln
