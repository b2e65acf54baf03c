// The trainer's checkpoint is guarded: its path is checked before anything trains, a second
// writer fails at once, and a resumed run must be the run the checkpoint was written by.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "support/cpu_test_util.h"
#include "support/temp_dir.h"
#include "train/tiny_run.h"

namespace kiln {
namespace {

using testing::contains;
using testing::read_text;
using testing::error_of;
using testing::expect_error;
using testing::read_bytes;
using testing::TempDir;
using testing::tiny_compile;
using testing::tiny_dataset;
using testing::tiny_model;
using testing::tiny_train;

// Trains `epochs` epochs of the tiny model into `ckpt` and lets the trainer go.
void train_into(const std::string& ckpt, int epochs, const std::string& optimizer = "sgd") {
  Trainer trainer(tiny_model(), tiny_compile(optimizer), tiny_train(epochs, ckpt));
  trainer.fit(tiny_dataset(), {});
}

TrainOptions resuming(const std::string& ckpt, int epochs) {
  TrainOptions t = tiny_train(epochs, ckpt);
  t.resume = true;
  return t;
}

TrainOptions overwriting(const std::string& ckpt, int epochs) {
  TrainOptions t = tiny_train(epochs, ckpt);
  t.overwrite = true;
  return t;
}

// ---- the path, before training ----

TEST(CheckpointPath, MissingFolderIsAnErrorBeforeAnythingTrains) {
  TempDir dir;
  const std::string ckpt = dir.file("runs/a/run.safetensors");
  expect_error([&] { Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1, ckpt)); },
               {"folder '" + dir.file("runs/a") + "'", "'" + ckpt + "'", "does not exist", "mkdir -p"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs")));
}

TEST(CheckpointPath, FolderOrFileInTheWayIsAnError) {
  TempDir dir;
  expect_error([&] { Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1, dir.path().string())); },
               {"is a folder", "run.safetensors"});
  testing::write_bytes(dir.file("plain"), {1, 2, 3});
  expect_error([&] { Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1, dir.file("plain/run"))); },
               {"'" + dir.file("plain") + "'", "is not a folder"});
}

TEST(CheckpointPath, FolderTakingNoFilesIsAnErrorBeforeAnythingTrains) {
  // /proc takes no new files, even from root.
  expect_error([&] { Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1, "/proc/kiln_run.safetensors")); },
               {"/proc", "writable"});
}

TEST(CheckpointPath, UnwritableFolderIsAnErrorBeforeAnythingTrains) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may write into a folder without write permission";
  TempDir dir;
  std::filesystem::create_directories(dir.file("ro"));
  ::chmod(dir.file("ro").c_str(), 0555);
  const std::string msg = error_of([&] {
    Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1, dir.file("ro/run.safetensors")));
  });
  ::chmod(dir.file("ro").c_str(), 0755);
  EXPECT_TRUE(contains(msg, "not writable")) << msg;
}

// ---- the lock ----

TEST(CheckpointLock, SecondWriterOfTheSameCheckpointFailsAtOnce) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  {
    Trainer first(tiny_model(), tiny_compile(), tiny_train(1, ckpt));
    EXPECT_EQ(read_text(ckpt + ".lock"), std::to_string(::getpid()) + "\n");
    expect_error([&] { Trainer second(tiny_model(), tiny_compile(), tiny_train(1, ckpt)); },
                 {"checkpoint '" + ckpt + "' is being written by another run", "'" + ckpt + ".lock'",
                  "this process (pid " + std::to_string(::getpid()) + ")", "another checkpoint path"});
    first.fit(tiny_dataset(), {});  // the second attempt took nothing from the first
    EXPECT_TRUE(std::filesystem::exists(ckpt));
  }
  EXPECT_FALSE(std::filesystem::exists(ckpt + ".lock"));  // removed at the end
  Trainer third(tiny_model(), tiny_compile(), overwriting(ckpt, 1));  // the first's file is there
  EXPECT_TRUE(std::filesystem::exists(ckpt + ".lock"));
}

TEST(CheckpointLock, AnotherProcessHoldingItIsNamedAndALockLeftByADeadOneIsTakenOver) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a writer that is killed while it holds the lock: no destructor runs
    ::close(ready[0]), ::close(release[1]);  // so that the parent's close is this read's end of file
    ::alarm(60);                             // and never outlive a parent that failed
    char ok = '1', dummy;
    try {
      static CheckpointLock* lock = new CheckpointLock(ckpt);
      (void)lock;
    } catch (...) {
      ok = '0';
    }
    (void)!::write(ready[1], &ok, 1);
    (void)!::read(release[0], &dummy, 1);
    ::_exit(0);
  }
  ::close(ready[1]), ::close(release[0]);
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, '1');
  expect_error([&] { Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1, ckpt)); },
               {"is being written by another run", "process " + std::to_string(child)});
  ::close(release[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  // Its lock file stays behind, naming a process that no longer runs.
  EXPECT_EQ(read_text(ckpt + ".lock"), std::to_string(child) + "\n");
  {
    Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1, ckpt));
    EXPECT_EQ(read_text(ckpt + ".lock"), std::to_string(::getpid()) + "\n");
    trainer.fit(tiny_dataset(), {});
  }
  EXPECT_FALSE(std::filesystem::exists(ckpt + ".lock"));
  ::close(ready[0]);
}

// ---- an earlier run's checkpoint: resumed, replaced when asked to, else refused ----

TEST(CheckpointTarget, ExistingCheckpointWithoutResumeOrOverwriteIsRefusedBeforeAnythingIsCompiled) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  train_into(ckpt, 2);
  const std::vector<uint8_t> before = read_bytes(ckpt);
  const std::vector<std::string> parts = {"checkpoint '" + ckpt + "' already exists",
                                          "replace it after its first epoch",
                                          "--resume",
                                          "TrainOptions::resume",
                                          "--overwrite",
                                          "TrainOptions::overwrite",
                                          "another checkpoint path",
                                          "left as it was"};
  expect_error([&] { Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1, ckpt)); }, parts);
  expect_error([&] { check_checkpoint_target(tiny_train(1, ckpt)); }, parts);  // the rule on its own
  EXPECT_EQ(read_bytes(ckpt), before);
  EXPECT_EQ(testing::file_names(dir.path()), std::vector<std::string>{"run.safetensors"});  // no lock left behind
  // Nothing to refuse: no file there yet, resume or overwrite set, or no checkpoint at all.
  check_checkpoint_target(tiny_train(1, dir.file("other.safetensors")));
  check_checkpoint_target(resuming(ckpt, 2));
  check_checkpoint_target(overwriting(ckpt, 2));
  check_checkpoint_target(tiny_train(1));
}

TEST(CheckpointTarget, OverwriteReplacesTheEarlierRunsCheckpoint) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  train_into(ckpt, 2);
  Trainer trainer(tiny_model(), tiny_compile(), overwriting(ckpt, 1));
  EXPECT_FALSE(trainer.resumed());
  EXPECT_EQ(trainer.resumed_epochs(), 0);
  const auto reports = trainer.fit(tiny_dataset(), {});
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].epoch, 0);  // from the start, not from the earlier run's epoch 2
  const auto meta = load_safetensors(ckpt).metadata;
  EXPECT_EQ(meta.at("epochs_done"), "1");
  EXPECT_EQ(meta.at("epochs"), "1");
}

TEST(CheckpointTarget, ResumeSaysWhetherItResumed) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  {
    Trainer fresh(tiny_model(), tiny_compile(), resuming(ckpt, 2));  // nothing there yet: starts fresh
    EXPECT_FALSE(fresh.resumed());
    EXPECT_EQ(fresh.resumed_epochs(), 0);
    EXPECT_EQ(fresh.fit(tiny_dataset(), {}).size(), 2u);
  }
  Trainer resumed(tiny_model(), tiny_compile(), resuming(ckpt, 3));
  EXPECT_TRUE(resumed.resumed());
  EXPECT_EQ(resumed.resumed_epochs(), 2);
  EXPECT_EQ(resumed.fit(tiny_dataset(), {}).size(), 1u);
  Trainer plain(tiny_model(), tiny_compile(), tiny_train(1, dir.file("new.safetensors")));
  EXPECT_FALSE(plain.resumed());
}

TEST(CheckpointTarget, ResumeAndOverwriteExcludeEachOther) {
  TempDir dir;
  TrainOptions t = resuming(dir.file("run.safetensors"), 1);
  t.overwrite = true;
  expect_error([&] { Trainer trainer(tiny_model(), tiny_compile(), t); }, {"resume and overwrite exclude each other"});
}

TEST(CheckpointTarget, ACheckpointBeingWrittenIsReportedAsThatFirst) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  train_into(ckpt, 1);
  Trainer writer(tiny_model(), tiny_compile(), resuming(ckpt, 2));
  // --resume or --overwrite would not help while another run writes it.
  const std::string msg = error_of([&] { Trainer second(tiny_model(), tiny_compile(), tiny_train(1, ckpt)); });
  EXPECT_TRUE(contains(msg, "is being written by another run")) << msg;
  EXPECT_FALSE(contains(msg, "already exists")) << msg;
}

// ---- the recipe ----

TEST(CheckpointRecipe, IsRecordedInTheMetadata) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  CompileOptions c = tiny_compile();
  c.label_smoothing = 0.1f;
  c.optimizer.set("nesterov", 1);
  TrainOptions t = tiny_train(2, ckpt);
  t.augment.pad_crop = 1;
  Trainer trainer(tiny_model(), c, t);
  trainer.fit(tiny_dataset(), {});
  const auto meta = load_safetensors(ckpt).metadata;
  const std::map<std::string, std::string> expected{
      {"recipe.model", "tiny"},        {"recipe.input", "8x8x1"},         {"recipe.classes", "3"},
      {"recipe.batch", "16"},          {"recipe.precision", "fp32"},      {"recipe.optimizer", "sgd"},
      {"recipe.momentum", "0.9"},      {"recipe.nesterov", "true"},       {"recipe.weight_decay", "0"},
      {"recipe.schedule", "cosine"},   {"recipe.lr", "0.05"},             {"recipe.warmup", "0"},
      {"recipe.label_smoothing", "0.1"}, {"recipe.seed", "1"},            {"recipe.crop_pad", "1"},
      {"recipe.hflip", "false"},       {"kiln_version", kVersion},        {"epochs", "2"},
      {"epochs_done", "2"},            {"format", "kiln-checkpoint-2"}};
  for (const auto& [key, value] : expected) {
    ASSERT_TRUE(meta.count(key)) << key;
    EXPECT_EQ(meta.at(key), value) << key;
  }
  for (const auto& [key, value] : trainer.recipe()) EXPECT_EQ(meta.at("recipe." + key), value) << key;
}

TEST(CheckpointRecipe, ResumeRefusesAnotherRecipeListingEachDifference) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  train_into(ckpt, 1);
  const std::vector<uint8_t> before = read_bytes(ckpt);
  TrainOptions t = resuming(ckpt, 5);
  t.seed = 2;
  t.schedule.lr = 0.1f;
  t.augment.hflip = true;
  const std::string msg =
      error_of([&] { Trainer trainer(tiny_model("tiny2"), tiny_compile("sgd", 8), t); });
  for (const char* part :
       {"cannot resume from checkpoint", "different recipe", "model: tiny in the checkpoint, tiny2 in this run",
        "batch: 16 in the checkpoint, 8 in this run", "lr: 0.05 in the checkpoint, 0.1 in this run",
        "seed: 1 in the checkpoint, 2 in this run", "hflip: false in the checkpoint, true in this run",
        "only the epoch count may change"})
    EXPECT_TRUE(contains(msg, part)) << part << "\n" << msg;
  EXPECT_FALSE(contains(msg, "epochs")) << msg;
  EXPECT_FALSE(contains(msg, "momentum")) << msg;  // unchanged settings are not listed
  EXPECT_EQ(read_bytes(ckpt), before);
}

TEST(CheckpointRecipe, ResumeMayTrainMoreEpochs) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  train_into(ckpt, 1);
  Trainer trainer(tiny_model(), tiny_compile(), resuming(ckpt, 3));
  const auto reports = trainer.fit(tiny_dataset(), {});
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].epoch, 1);
  EXPECT_EQ(load_safetensors(ckpt).metadata.at("epochs_done"), "3");
}

TEST(CheckpointRecipe, ResumeContinuesBitExactly) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors"), after_one = dir.file("epoch1.safetensors");
  Trainer straight(tiny_model(), tiny_compile(), tiny_train(2, ckpt));
  const auto full = straight.fit(tiny_dataset(), {}, {}, [&](const EpochReport& r) {
    if (r.epoch == 0) std::filesystem::copy_file(ckpt, after_one);
  });
  Trainer resumed(tiny_model(), tiny_compile(), resuming(after_one, 2));
  const auto rest = resumed.fit(tiny_dataset(), {});
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].train_loss, full[1].train_loss);
  EXPECT_EQ(read_bytes(after_one), read_bytes(ckpt));
}

TEST(CheckpointRecipe, SgdCheckpointResumedWithAdamWNamesTheOptimizer) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  train_into(ckpt, 1, "sgd");
  const std::string msg = error_of([&] {
    Trainer trainer(tiny_model(), tiny_compile("adamw"), resuming(ckpt, 2));
  });
  EXPECT_TRUE(contains(msg, "optimizer: sgd in the checkpoint, adamw in this run")) << msg;
  EXPECT_FALSE(contains(msg, "has no tensor")) << msg;
  EXPECT_FALSE(contains(msg, "beta1")) << msg;  // the other optimizer's settings are no differences of their own
}

TEST(CheckpointRecipe, CheckpointsWithoutARecipeStillResumeAndNameTheOptimizer) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  train_into(ckpt, 1, "sgd");
  // As kiln wrote checkpoints before they recorded the recipe.
  SafetensorsFile file = load_safetensors(ckpt);
  std::map<std::string, std::string> old;
  for (const char* key : {"epochs_done", "global_step", "seed", "norm_mean", "norm_std"})
    old[key] = file.metadata.at(key);
  old["format"] = "kiln-checkpoint-1";
  save_safetensors(ckpt, file.tensors, old);
  expect_error([&] { Trainer trainer(tiny_model(), tiny_compile("adamw"), resuming(ckpt, 2)); },
               {"written with the sgd optimizer", "'optimizer.momentum_buffer'", "this run uses adamw",
                "--optimizer sgd"});
  TrainOptions other_seed = resuming(ckpt, 2);
  other_seed.seed = 7;
  expect_error([&] { Trainer trainer(tiny_model(), tiny_compile(), other_seed); },
               {"seed: 1 in the checkpoint, 7 in this run"});
  Trainer trainer(tiny_model(), tiny_compile(), resuming(ckpt, 2));
  EXPECT_EQ(trainer.fit(tiny_dataset(), {}).size(), 1u);
}

TEST(CheckpointRecipe, ResumeWithoutACheckpointPathIsAnError) {
  TrainOptions t = tiny_train(1);
  t.resume = true;
  expect_error([&] { Trainer trainer(tiny_model(), tiny_compile(), t); }, {"resuming needs", "--checkpoint"});
}

// ---- a damaged checkpoint ----

// Where the 4 bytes in the middle of tensor `name`'s data lie in the checkpoint at `path`.
size_t middle_of(const std::string& path, const std::string& name) {
  const std::vector<uint8_t> bytes = read_bytes(path);
  size_t at = 8;
  for (int i = 0; i < 8; ++i) at += size_t(bytes[i]) << (8 * i);
  for (const NamedTensor& t : load_safetensors(path).tensors) {  // in file data order
    if (t.name == name) return at + t.data.size() / 2 / 4 * 4;
    at += t.data.size();
  }
  ADD_FAILURE() << "no tensor " << name << " in " << path;
  return 0;
}

TEST(CheckpointDamage, ResumeRefusesACorruptCheckpointNamingTheTensorAndRestoresNothing) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors"), tensor = "fc.weight";
  train_into(ckpt, 1);
  const std::vector<uint8_t> good = read_bytes(ckpt);
  const size_t at = middle_of(ckpt, tensor);
  uint32_t bits = 0;
  std::memcpy(&bits, good.data() + at, 4);
  // A flipped low bit leaves a finite weight that would train on; an infinity would be taken for
  // a diverged run. Both are damage to the file, and said to be.
  for (uint32_t damaged : {bits ^ 1u, 0x7F800000u}) {
    std::vector<uint8_t> bytes = good;
    std::memcpy(bytes.data() + at, &damaged, 4);  // little-endian, as the file
    testing::write_bytes(ckpt, bytes);
    const std::vector<uint8_t> before = read_bytes(ckpt);
    const std::string msg = error_of([&] { Trainer trainer(tiny_model(), tiny_compile(), resuming(ckpt, 3)); });
    for (const std::string& part : {"checkpoint '" + ckpt + "' is corrupt",
                                    "tensor '" + tensor + "' does not match the checksum written with it",
                                    std::string("restore it from a backup or start a new run")})
      EXPECT_TRUE(contains(msg, part)) << part << "\n" << msg;
    for (const char* advice : {"good", "diverged", "learning rate"}) EXPECT_FALSE(contains(msg, advice)) << msg;
    EXPECT_EQ(read_bytes(ckpt), before);  // left as it was, for whoever restores it

    // A trainer that loads it keeps what it had.
    Trainer other(tiny_model(), tiny_compile(), tiny_train(1));
    other.save_checkpoint(dir.file("before.safetensors"), 0);
    expect_error([&] { other.load_checkpoint(ckpt); }, {"is corrupt", "tensor '" + tensor + "'"});
    other.save_checkpoint(dir.file("after.safetensors"), 0);
    EXPECT_EQ(read_bytes(dir.file("after.safetensors")), read_bytes(dir.file("before.safetensors")));
  }
}

}  // namespace
}  // namespace kiln
