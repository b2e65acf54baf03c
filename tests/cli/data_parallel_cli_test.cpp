// `kiln train --gpus` and `kiln bench --gpus` as a user types them, where the GPUs cannot train: the
// launch options are checked before anything starts, and when the ranks fail the launcher stops
// them all and ends non-zero, naming the rank that failed first and how.
#include <gtest/gtest.h>

#include <string>

#include "support/kiln_cli.h"
#include "support/program_fixture.h"

namespace kiln {
namespace {

using testing::expect_contains;
using testing::kiln;

TEST(DataParallelCli, LaunchOptionsAreCheckedBeforeAnythingStarts) {
  for (const auto& [args, parts] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"train --gpus 0 --model digits_cnn --data x", {"--gpus"}},
           {"train --gpus 1,1 --model digits_cnn --data x", {"--gpus", "1"}},
           {"train --gpus two --model digits_cnn --data x", {"--gpus", "two"}},
           {"bench --gpus 2 --nodes 2 --model digits_cnn", {"--master"}},
           {"bench --gpus 2 --nodes 2 --node-rank 2 --master h:1 --model digits_cnn", {"--node-rank"}},
           {"bench --gpus 2 --master host --model digits_cnn", {"--master", "HOST:PORT"}},
           {"bench --nodes 2 --model digits_cnn", {"--gpus"}},
       }) {
    const testing::Result r = kiln(args);
    EXPECT_NE(r.rc, 0) << args;
    expect_contains(r, parts, args);
  }
}

TEST(DataParallelCli, RanksThatFailEndTheLaunchNamingTheFirst) {
  // On the CPU no rank can train data-parallel: both fail, and the launcher ends with the status of
  // the first, naming it, after stopping the other.
  const std::string args =
      "train --gpus 2 --device cpu --model digits_cnn --data " + testing::shared_digits_dir() + " --epochs 1";
  const testing::Result r = kiln(args);
  EXPECT_EQ(r.rc, 2) << r.output;
  expect_contains(r, {"data-parallel training runs on GPUs", "failed first", "rank "}, args);
}

}  // namespace
}  // namespace kiln
