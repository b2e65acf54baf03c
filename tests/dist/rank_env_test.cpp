// rank_env_from_environment: the variables a launcher sets, their defaults, and an error naming
// the variable for each way they can be wrong.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data_parallel.h"
#include "support/cpu_test_util.h"
#include "support/scoped_env.h"

namespace kiln {
namespace {

using testing::expect_error;
using testing::ScopedEnv;

// Every variable the reader looks at, set as given (nullptr: unset) for one test, restored after.
class RankVariables {
 public:
  RankVariables(const char* world_size, const char* rank, const char* local_rank = nullptr,
                const char* device = nullptr, const char* addr = nullptr, const char* port = nullptr) {
    const std::pair<const char*, const char*> values[] = {{"WORLD_SIZE", world_size}, {"RANK", rank},
                                                          {"LOCAL_RANK", local_rank}, {"KILN_RANK_DEVICE", device},
                                                          {"MASTER_ADDR", addr},       {"MASTER_PORT", port}};
    for (const auto& [name, value] : values) set_.push_back(std::make_unique<ScopedEnv>(name, value));
  }

 private:
  std::vector<std::unique_ptr<ScopedEnv>> set_;
};

TEST(RankEnv, AloneWithoutWorldSize) {
  RankVariables vars(nullptr, "1", "1", "1", "10.0.0.1", "29500");
  EXPECT_FALSE(rank_env_from_environment().has_value());
}

TEST(RankEnv, EmptyWorldSizeCountsAsUnset) {
  RankVariables vars("", nullptr);
  EXPECT_FALSE(rank_env_from_environment().has_value());
}

TEST(RankEnv, ReadsEveryVariable) {
  RankVariables vars("8", "5", "1", "3", "10.1.2.3", "29555");
  const std::optional<RankEnv> env = rank_env_from_environment();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->ranks, 8);
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->device, 3);
  EXPECT_EQ(env->master_addr, "10.1.2.3");
  EXPECT_EQ(env->master_port, 29555);
}

TEST(RankEnv, Defaults) {
  // LOCAL_RANK defaults to RANK, the device to LOCAL_RANK, the address to this machine.
  RankVariables vars("4", "2", nullptr, nullptr, nullptr, "29500");
  const std::optional<RankEnv> env = rank_env_from_environment();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->local_rank, 2);
  EXPECT_EQ(env->device, 2);
  EXPECT_EQ(env->master_addr, "127.0.0.1");

  RankVariables with_local("4", "2", "0", nullptr, nullptr, "29500");
  EXPECT_EQ(rank_env_from_environment()->device, 0);
}

TEST(RankEnv, OneRankNeedsNoPort) {
  RankVariables vars("1", "0");
  const std::optional<RankEnv> env = rank_env_from_environment();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->ranks, 1);
  EXPECT_EQ(env->master_port, 0);
}

TEST(RankEnv, MalformedNumbersNameTheVariable) {
  {
    RankVariables vars("two", "0", nullptr, nullptr, nullptr, "29500");
    expect_error([] { rank_env_from_environment(); }, {"WORLD_SIZE", "'two'", "not an integer"});
  }
  {
    RankVariables vars("2", "1x", nullptr, nullptr, nullptr, "29500");
    expect_error([] { rank_env_from_environment(); }, {"RANK", "'1x'", "not an integer"});
  }
  {
    RankVariables vars("2", "1", " 1", nullptr, nullptr, "29500");
    expect_error([] { rank_env_from_environment(); }, {"LOCAL_RANK", "not an integer"});
  }
  {
    RankVariables vars("2", "1", nullptr, "gpu1", nullptr, "29500");
    expect_error([] { rank_env_from_environment(); }, {"KILN_RANK_DEVICE", "'gpu1'"});
  }
  {
    RankVariables vars("2", "1", nullptr, nullptr, nullptr, "port");
    expect_error([] { rank_env_from_environment(); }, {"MASTER_PORT", "'port'"});
  }
  {
    RankVariables vars("99999999999", "0", nullptr, nullptr, nullptr, "29500");
    expect_error([] { rank_env_from_environment(); }, {"WORLD_SIZE", "out of range"});
  }
}

TEST(RankEnv, InconsistentValuesNameTheVariableAndTheFix) {
  {
    RankVariables vars("0", "0");
    expect_error([] { rank_env_from_environment(); }, {"WORLD_SIZE=0", "number of ranks"});
  }
  {
    RankVariables vars("2", nullptr, nullptr, nullptr, nullptr, "29500");
    expect_error([] { rank_env_from_environment(); }, {"RANK is not", "set RANK", "0 to 1"});
  }
  {
    RankVariables vars("2", "2", nullptr, nullptr, nullptr, "29500");
    expect_error([] { rank_env_from_environment(); }, {"RANK=2", "outside 0 to 1", "WORLD_SIZE=2"});
  }
  {
    RankVariables vars("2", "-1", nullptr, nullptr, nullptr, "29500");
    expect_error([] { rank_env_from_environment(); }, {"RANK=-1", "outside 0 to 1"});
  }
  {
    RankVariables vars("2", "1", "-1", nullptr, nullptr, "29500");
    expect_error([] { rank_env_from_environment(); }, {"LOCAL_RANK=-1"});
  }
  {
    RankVariables vars("2", "1", nullptr, "-2", nullptr, "29500");
    expect_error([] { rank_env_from_environment(); }, {"KILN_RANK_DEVICE=-2", "negative"});
  }
}

TEST(RankEnv, PortIsNeededAndChecked) {
  {
    RankVariables vars("2", "1");
    expect_error([] { rank_env_from_environment(); }, {"MASTER_PORT is not set", "WORLD_SIZE=2", "e.g. 29500"});
  }
  {
    RankVariables vars("2", "1", nullptr, nullptr, nullptr, "0");
    expect_error([] { rank_env_from_environment(); }, {"MASTER_PORT=0", "1 to 65535"});
  }
  {
    RankVariables vars("2", "1", nullptr, nullptr, nullptr, "65536");
    expect_error([] { rank_env_from_environment(); }, {"MASTER_PORT=65536", "1 to 65535"});
  }
  {
    RankVariables vars("1", "0", nullptr, nullptr, nullptr, "70000");  // checked even alone, when set
    expect_error([] { rank_env_from_environment(); }, {"MASTER_PORT=70000"});
  }
}

}  // namespace
}  // namespace kiln
