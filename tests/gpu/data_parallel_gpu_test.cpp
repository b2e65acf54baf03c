// Data parallel on the GPU. Alone (no WORLD_SIZE): a group of one rank runs every collective of a
// data-parallel step and must change no byte of what the program computes without it. Started as
// two ranks (scripts/gpu_check.sh data-parallel: RANK, WORLD_SIZE, MASTER_PORT set for each), the
// ranks training batch B/2 each on the halves of a batch must follow one GPU training batch B.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kiln/compile.h"
#include "kiln/data_parallel.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

// Convolutions, ReLU, pooling and a classifier, without BatchNorm: BatchNorm's statistics come
// from each rank's own share of the batch (as in PyTorch's DistributedDataParallel), so only a model
// without it computes the same function on two ranks as on one GPU. Convolutions without bias:
// the GPU backend takes none (a conv bias before BatchNorm is redundant).
Blueprint no_batch_norm() {
  Blueprint m("no_bn");
  m.input(16, 16, 3);
  m.conv(16, 3, 1, 1, false, "conv1").relu("relu1").maxpool(2, 2, 0, "pool1");
  m.conv(32, 3, 1, 1, false, "conv2").relu("relu2").global_avgpool("pool2").flatten("flatten").fc(10, true, "fc");
  return m;
}

std::unique_ptr<Executable> make(const Blueprint& model, Precision precision, int batch, int device,
                                 std::shared_ptr<ProcessGroup> group) {
  CompileOptions o;
  o.device = Device::CUDA, o.device_index = device, o.precision = precision, o.batch = batch;
  o.optimizer.name = "sgd";
  o.optimizer.set("momentum", 0.9).set("weight_decay", 1e-4);
  o.cuda.tune = false;  // the same (first) plans in every program
  // The statistics by kiln's sum kernel: cuDNN's fp16 genstats graph ends its sums in atomics, whose
  // last bits differ between two programs even without any rank (CudaOptions::conv_stats).
  o.cuda.conv_stats = 0;
  o.data_parallel = std::move(group);
  auto exe = std::make_unique<Executable>(compile(model, o), 11);
  exe->broadcast_state_from_rank0();
  return exe;
}

// Step `step`'s global batch of `rows` rows; `first` and `count` pick this program's rows of it.
void write_rows(Executable& exe, int step, int rows, int first, int count) {
  const Program& p = exe.program();
  const int64_t row = numel(p.tensors[p.input].shape) / p.tensors[p.input].shape[0];
  std::mt19937 rng(500 + step);
  std::normal_distribution<float> normal;
  std::vector<float> all(size_t(rows * row));
  for (float& v : all) v = normal(rng);
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  for (int i = 0; i < rows; ++i) labels[size_t(i)] = int32_t((i * 7 + step) % 10);
  exe.write(p.input, all.data() + size_t(first * row), size_t(count * row) * sizeof(float));
  exe.write(p.label, labels.data() + first, size_t(count) * sizeof(int32_t));
}

std::vector<std::byte> bytes_of(Executable& exe, int id) {
  std::vector<std::byte> b(exe.program().tensors[size_t(id)].bytes());
  exe.read(id, b.data(), b.size());
  exe.synchronize();
  return b;
}

std::vector<float> params(Executable& exe) {
  const std::vector<std::byte> b = bytes_of(exe, exe.program().param_region);
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(float));
  return v;
}

TEST(DataParallelGpu, OneRankChangesNoByteOfTheStep) {
  if (!gpu_test::cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!data_parallel_built()) GTEST_SKIP() << "built without NCCL";
  if (rank_env_from_environment()) GTEST_SKIP() << "run as one of several ranks: the one-rank test runs alone";
  RankEnv env;  // rank 0 of 1: NCCL's communicator of one GPU, no rendezvous
  std::shared_ptr<ProcessGroup> group = join_process_group(env, 60);
  for (Precision precision : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(precision));
    auto alone = make(zoo::digits_cnn(), precision, 32, 0, nullptr);
    auto ranked = make(zoo::digits_cnn(), precision, 32, 0, group);
    for (int step = 0; step < 5; ++step) {  // the first op by op, the second captured, then replays
      for (Executable* exe : {alone.get(), ranked.get()}) {
        write_rows(*exe, step, 32, 0, 32);
        exe->run_step({0.05f, step, 1});
      }
    }
    const Program& p = alone->program();
    EXPECT_TRUE(bytes_of(*alone, p.param_region) == bytes_of(*ranked, p.param_region));
    EXPECT_TRUE(bytes_of(*alone, p.loss) == bytes_of(*ranked, p.loss));
    for (int id : p.opt_state_regions) EXPECT_TRUE(bytes_of(*alone, id) == bytes_of(*ranked, id));
  }
  group->leave();
}

TEST(DataParallelGpu, TwoRanksFollowOneGpuTrainingTheWholeBatch) {
  const std::optional<RankEnv> env = rank_env_from_environment();
  if (!env || env->ranks != 2) GTEST_SKIP() << "needs two ranks (scripts/gpu_check.sh data-parallel starts them)";
  std::shared_ptr<ProcessGroup> group = join_process_group(*env, 120);
  constexpr int kBatch = 64, kHalf = kBatch / 2, kSteps = 50;
  auto ranked = make(no_batch_norm(), Precision::FP32, kHalf, env->device, group);
  auto whole = make(no_batch_norm(), Precision::FP32, kBatch, env->device, nullptr);
  auto half = make(no_batch_norm(), Precision::FP32, kHalf, env->device, nullptr);  // the wrong answer
  double worst_loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    write_rows(*ranked, step, kBatch, env->rank * kHalf, kHalf);
    write_rows(*whole, step, kBatch, 0, kBatch);
    write_rows(*half, step, kBatch, 0, kHalf);
    const StepScalars s{0.05f, step, 1};
    ranked->run_step(s), whole->run_step(s), half->run_step(s);
    std::vector<double> loss = {double(ranked->read<float>(ranked->program().loss)[0])};
    group->reduce_host(loss, HostReduce::Sum);  // the mean of the halves' means: the whole batch's
    const double one = whole->read<float>(whole->program().loss)[0];
    worst_loss = std::max(worst_loss, std::fabs(loss[0] / 2 - one) / std::fabs(one));
  }
  const std::vector<float> w_ranked = params(*ranked), w_whole = params(*whole), w_half = params(*half);
  // Both sides add the same fp32 products per gradient element, in another order (two halves of
  // 32 rows averaged, against 64 rows at once; other cuDNN plans for other batches): each sum's
  // relative error is a few 2^-24 times its terms' spread, ~1e-6 on these sizes. Fifty SGD steps
  // at lr 0.05 carry such differences along without blowing them up (the model is small and
  // smooth), so 1e-4 of the largest weight leaves a margin of ~100; training on one half alone
  // moves the weights by ~1e-2, which the same bound rejects by far.
  constexpr double kBound = 1e-4;
  const double ranked_distance = testing::rel_err(w_ranked, w_whole);
  const double wrong_distance = testing::rel_err(w_half, w_whole);
  EXPECT_LT(ranked_distance, kBound);
  EXPECT_LT(worst_loss, kBound);
  EXPECT_GT(wrong_distance, 10 * kBound) << "the bound must tell half a batch from the whole one";
  // Both ranks hold the same weights, bit for bit: they apply the same averaged gradients.
  std::vector<double> first = {double(w_ranked[0]), double(w_ranked.back())}, check = first;
  group->reduce_host(check, HostReduce::Max);
  EXPECT_EQ(first, check);
  group->leave();
  std::printf("rank %d: 50 steps, relative weight distance to one GPU %.3g (half batch alone: %.3g), worst loss %.3g\n",
              env->rank, ranked_distance, wrong_distance, worst_loss);
}

}  // namespace
}  // namespace kiln
