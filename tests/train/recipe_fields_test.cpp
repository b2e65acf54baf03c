// The recipe a resumed run must share comes from one table (src/train/recipe_fields.cpp): every
// row yields its value where it applies, in the table's order, and a resume that changes any one
// setting is refused naming that setting alone, with the flag (or field) that gives the
// checkpoint's value back. The optimizers' rows are their families' settings: every family's run
// yields its rows, and a change of any of its settings is named with the row's own fix.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "compile/optimizer_family.h"
#include "compile/optimizer_settings.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"
#include "train/recipe_fields.h"
#include "train/tiny_run.h"

namespace kiln {
namespace {

using testing::contains;
using testing::error_of;
using testing::TempDir;
using testing::tiny_compile;
using testing::tiny_train;

// tiny_model's layers with `classes` outputs.
Blueprint tiny_model(const std::string& name = "tiny", int classes = 3) {
  Blueprint m(name);
  m.input(8, 8, 1).conv(4, 3, 1, 1, false, "conv1").bn("bn1").relu("relu1").maxpool(2, 2, 0, "pool1");
  m.flatten("flatten").fc(classes, true, "fc");
  return m;
}

// The runs whose rows together are the whole table: SGD on the step schedule, AdamW on cosine,
// LARS, and a run of every other optimizer family.
struct RunSettings {
  std::string model = "tiny";
  int classes = 3;
  CompileOptions compile;
  TrainOptions train;
};

RunSettings sgd_step_run(const std::string& ckpt = {}) {
  RunSettings r;
  r.compile = tiny_compile("sgd");
  r.train = tiny_train(3, ckpt);
  r.train.schedule.kind = ScheduleKind::Step;
  return r;
}

RunSettings adamw_run(const std::string& ckpt = {}) {
  RunSettings r;
  r.compile = tiny_compile("adamw");
  r.compile.freeze = "conv1";  // a row recorded only when set
  r.train = tiny_train(3, ckpt);
  return r;
}

RunSettings lars_run(const std::string& ckpt = {}) {
  RunSettings r;
  r.compile = tiny_compile("lars");
  r.compile.optimizer.set("trust_coefficient", 0.02);
  r.train = tiny_train(3, ckpt);
  return r;
}

RunSettings family_run(const std::string& optimizer, const std::string& ckpt = {}) {
  RunSettings r;
  r.compile = tiny_compile(optimizer);
  r.train = tiny_train(3, ckpt);
  return r;
}

std::vector<RunSettings> every_run() {
  std::vector<RunSettings> runs = {sgd_step_run(), adamw_run(), lars_run()};
  for (const OptimizerFamily* family : all_optimizer_families()) runs.push_back(family_run(family->name));
  return runs;
}

std::map<std::string, std::string> recipe_of(const RunSettings& r) {
  Trainer trainer(tiny_model(r.model, r.classes), r.compile, r.train);
  const auto recipe = trainer.recipe();
  return {recipe.begin(), recipe.end()};
}

RunSettings resuming(RunSettings r) {
  r.train.resume = true;
  return r;
}

TEST(RecipeFields, EveryRowYieldsItsValueInTableOrder) {
  std::set<std::string> seen;
  for (const RunSettings& run : every_run()) {
    Trainer trainer(tiny_model(), run.compile, run.train);
    const auto recipe = trainer.recipe();
    const RecipeRun source{trainer.executable().program(), run.model, run.train};
    size_t i = 0;
    for (const RecipeField& row : recipe_fields()) {
      if (row.applies && !row.applies(source)) continue;
      ASSERT_LT(i, recipe.size()) << row.key;
      EXPECT_EQ(recipe[i].first, row.key);
      EXPECT_FALSE(recipe[i].second.empty()) << row.key;
      seen.insert(row.key);
      ++i;
    }
    EXPECT_EQ(i, recipe.size()) << "rows the table does not have";
  }
  EXPECT_EQ(seen.size(), recipe_fields().size()) << "a row that no run yields";

  const std::map<std::string, std::string> sgd = recipe_of(sgd_step_run());
  EXPECT_EQ(sgd.at("step_epochs"), "30");
  EXPECT_EQ(sgd.at("gamma"), "0.1");
  EXPECT_EQ(sgd.at("momentum"), "0.9");
  EXPECT_FALSE(sgd.count("beta1"));
  const std::map<std::string, std::string> adamw = recipe_of(adamw_run());
  EXPECT_EQ(adamw.at("beta1"), "0.9");
  EXPECT_EQ(adamw.at("beta2"), "0.999");
  EXPECT_EQ(adamw.at("eps"), "1e-08");
  EXPECT_EQ(adamw.at("schedule"), "cosine");
  EXPECT_FALSE(adamw.count("momentum"));
  EXPECT_FALSE(adamw.count("step_epochs"));
  EXPECT_FALSE(adamw.count("trust_coefficient"));
  EXPECT_FALSE(sgd.count("trust_coefficient"));
  EXPECT_FALSE(sgd.count("lars_skip_1d"));
  const std::map<std::string, std::string> lars = recipe_of(lars_run());
  EXPECT_EQ(lars.at("optimizer"), "lars");
  EXPECT_EQ(lars.at("trust_coefficient"), "0.02");
  EXPECT_EQ(lars.at("lars_skip_1d"), "true");
  EXPECT_EQ(lars.at("momentum"), "0.9");
  EXPECT_EQ(lars.at("weight_decay"), "0");
  EXPECT_FALSE(lars.count("nesterov"));
  EXPECT_FALSE(lars.count("beta1"));
}

enum class Base { Sgd, AdamW, Lars };  // the run whose checkpoint a change resumes from

RunSettings run_of(Base base, const std::string& ckpt) {
  switch (base) {
    case Base::Sgd: return sgd_step_run(ckpt);
    case Base::AdamW: return adamw_run(ckpt);
    case Base::Lars: return lars_run(ckpt);
  }
  return {};
}

// One setting changed from a checkpoint's run, and the line the refusal must hold for it.
struct Change {
  const char* key;
  Base base;
  std::function<void(RunSettings&)> change;
  std::string line;
};

std::vector<Change> changes() {
  return {
      {"model", Base::Sgd, [](RunSettings& r) { r.model = "tiny2"; },
       "model: tiny in the checkpoint, tiny2 in this run; resume with --model tiny"},
      {"input", Base::Sgd, [](RunSettings& r) { r.compile.input_hwc = {10, 10, 1}; },
       "input: 8x8x1 in the checkpoint, 10x10x1 in this run; resume with 8x8x1 as CompileOptions::input_hwc"},
      {"classes", Base::Sgd, [](RunSettings& r) { r.classes = 4; },
       "classes: 3 in the checkpoint, 4 in this run; resume with --classes 3"},
      {"batch", Base::Sgd, [](RunSettings& r) { r.compile.batch = 8; },
       "batch: 16 in the checkpoint, 8 in this run; resume with --batch 16 (CompileOptions::batch)"},
      {"precision", Base::Sgd, [](RunSettings& r) { r.compile.precision = Precision::FP64; },
       "precision: fp32 in the checkpoint, fp64 in this run; resume with --precision fp32"},
      {"optimizer", Base::Sgd, [](RunSettings& r) { r.compile.optimizer = {"adamw"}; },
       "optimizer: sgd in the checkpoint, adamw in this run; resume with --optimizer sgd"},
      {"optimizer", Base::Lars, [](RunSettings& r) { r.compile.optimizer = {"sgd"}; },
       "optimizer: lars in the checkpoint, sgd in this run; resume with --optimizer lars"},
      {"momentum", Base::Sgd, [](RunSettings& r) { r.compile.optimizer.set("momentum", 0.8); },
       "momentum: 0.9 in the checkpoint, 0.8 in this run; resume with --momentum 0.9"},
      {"momentum", Base::Lars, [](RunSettings& r) { r.compile.optimizer.set("momentum", 0.8); },
       "momentum: 0.9 in the checkpoint, 0.8 in this run; resume with --momentum 0.9"},
      {"nesterov", Base::Sgd, [](RunSettings& r) { r.compile.optimizer.set("nesterov", 1); },
       "nesterov: false in the checkpoint, true in this run; resume with --no-nesterov"},
      {"beta1", Base::AdamW, [](RunSettings& r) { r.compile.optimizer.set("beta1", 0.8); },
       "beta1: 0.9 in the checkpoint, 0.8 in this run; resume with 0.9 as CompileOptions::optimizer.values[\"beta1\"]"},
      {"beta2", Base::AdamW, [](RunSettings& r) { r.compile.optimizer.set("beta2", 0.99); },
       "beta2: 0.999 in the checkpoint, 0.99 in this run; resume with 0.999 as "
       "CompileOptions::optimizer.values[\"beta2\"]"},
      {"eps", Base::AdamW, [](RunSettings& r) { r.compile.optimizer.set("eps", 1e-6); },
       "eps: 1e-08 in the checkpoint, 1e-06 in this run; resume with --eps 1e-08"},
      {"trust_coefficient", Base::Lars, [](RunSettings& r) { r.compile.optimizer.set("trust_coefficient", 0.001); },
       "trust_coefficient: 0.02 in the checkpoint, 0.001 in this run; resume with --lars-eta 0.02"},
      {"lars_skip_1d", Base::Lars, [](RunSettings& r) { r.compile.optimizer.set("lars_skip_1d", 0); },
       "lars_skip_1d: true in the checkpoint, false in this run; resume with --lars-skip-1d "
       "(CompileOptions::optimizer.values[\"lars_skip_1d\"])"},
      {"weight_decay", Base::Sgd, [](RunSettings& r) { r.compile.optimizer.set("weight_decay", 1e-4); },
       "weight_decay: 0 in the checkpoint, 0.0001 in this run; resume with --weight-decay 0"},
      {"schedule", Base::Sgd, [](RunSettings& r) { r.train.schedule.kind = ScheduleKind::Cosine; },
       "schedule: step in the checkpoint, cosine in this run; resume with --schedule step"},
      {"lr", Base::Sgd, [](RunSettings& r) { r.train.schedule.lr = 0.1f; },
       "lr: 0.05 in the checkpoint, 0.1 in this run; resume with --lr 0.05 (TrainOptions::schedule.lr)"},
      {"warmup", Base::Sgd, [](RunSettings& r) { r.train.schedule.warmup_epochs = 1; },
       "warmup: 0 in the checkpoint, 1 in this run; resume with --warmup 0"},
      {"step_epochs", Base::Sgd, [](RunSettings& r) { r.train.schedule.step_epochs = 5; },
       "step_epochs: 30 in the checkpoint, 5 in this run; resume with --step-epochs 30"},
      {"gamma", Base::Sgd, [](RunSettings& r) { r.train.schedule.gamma = 0.5f; },
       "gamma: 0.1 in the checkpoint, 0.5 in this run; resume with --gamma 0.1"},
      {"label_smoothing", Base::Sgd, [](RunSettings& r) { r.compile.label_smoothing = 0.1f; },
       "label_smoothing: 0 in the checkpoint, 0.1 in this run; resume with --label-smoothing 0"},
      {"seed", Base::Sgd, [](RunSettings& r) { r.train.seed = 2; },
       "seed: 1 in the checkpoint, 2 in this run; resume with --seed 1 (TrainOptions::seed)"},
      {"crop_pad", Base::Sgd, [](RunSettings& r) { r.train.augment.pad_crop = 1; },
       "crop_pad: 0 in the checkpoint, 1 in this run; resume with --crop-pad 0"},
      {"hflip", Base::Sgd, [](RunSettings& r) { r.train.augment.hflip = true; },
       "hflip: false in the checkpoint, true in this run; resume with --no-hflip (TrainOptions::augment.hflip)"},
      {"freeze", Base::AdamW, [](RunSettings& r) { r.compile.freeze = "pool1"; },
       "freeze: conv1 in the checkpoint, pool1 in this run; resume with --freeze conv1 (CompileOptions::freeze)"},
  };
}

// Another value the row takes than `value`: a switch flipped, a number halved (or 0.5 for 0).
std::string other_value(const Setting& row, const std::string& value) {
  if (row.type == SettingType::Switch) return value == "true" ? "false" : "true";
  const double v = std::stod(value);
  const double other = v != 0 ? v / 2 : 0.5;
  EXPECT_TRUE(row.range.contains(other)) << row.info.key;
  return setting_number_text(float(other));
}

// A checkpoint of every optimizer family's run, resumed with each of its settings changed in turn.
void expect_each_optimizer_setting_named_alone(const TempDir& dir) {
  for (const OptimizerFamily* family : all_optimizer_families()) {
    const std::string ckpt = dir.file(std::string(family->name) + ".safetensors");
    const RunSettings base = family_run(family->name, ckpt);
    {
      Trainer trainer(tiny_model(), base.compile, base.train);
      trainer.save_checkpoint(ckpt, 1);
    }
    for (const Setting& row : family->settings()) {
      SCOPED_TRACE(std::string(family->name) + " " + row.info.key);
      RunSettings run = resuming(base);
      const std::string old_value = row.read(&base.compile.optimizer);
      const std::string new_value = other_value(row, old_value);
      row.write(&run.compile.optimizer, new_value);
      if (family->refusal && !family->refusal(run.compile.optimizer).empty()) continue;  // not a run at all
      const std::string msg = error_of([&] { Trainer trainer(tiny_model(), run.compile, run.train); });
      const std::string line = fmt::format("{}: {} in the checkpoint, {} in this run; resume with {}", row.info.key,
                                           old_value, new_value, row.fix_for(old_value));
      EXPECT_TRUE(contains(msg, "\n  " + line)) << msg;
      EXPECT_EQ(msg.find("\n  "), msg.rfind("\n  ")) << msg;
    }
  }
}

TEST(RecipeFields, EachChangedSettingIsNamedAloneInTheResumeErrorWithItsFix) {
  std::set<std::string> covered;
  for (const Change& c : changes()) covered.insert(c.key);
  for (const OptimizerFamily* family : all_optimizer_families())
    for (const Setting& row : family->settings()) covered.insert(row.info.key);
  for (const RecipeField& row : recipe_fields()) EXPECT_TRUE(covered.count(row.key)) << "no change of " << row.key;

  TempDir dir;
  auto checkpoint = [&](Base base) { return dir.file(std::to_string(int(base)) + ".safetensors"); };
  for (Base base : {Base::Sgd, Base::AdamW, Base::Lars}) {
    const RunSettings run = run_of(base, checkpoint(base));
    Trainer trainer(tiny_model(), run.compile, run.train);
    trainer.save_checkpoint(run.train.checkpoint, 1);
  }
  for (const Change& c : changes()) {
    SCOPED_TRACE(c.key);
    RunSettings run = resuming(run_of(c.base, checkpoint(c.base)));
    c.change(run);
    const std::string msg =
        error_of([&] { Trainer trainer(tiny_model(run.model, run.classes), run.compile, run.train); });
    EXPECT_TRUE(contains(msg, "cannot resume from checkpoint")) << msg;
    EXPECT_TRUE(contains(msg, "\n  " + c.line)) << msg;
    // The one line: another optimizer's or schedule's settings are no differences of their own.
    EXPECT_EQ(msg.find("\n  "), msg.rfind("\n  ")) << msg;
  }
  for (Base base : {Base::Sgd, Base::AdamW, Base::Lars}) {
    const RunSettings unchanged = resuming(run_of(base, checkpoint(base)));
    Trainer trainer(tiny_model(), unchanged.compile, unchanged.train);
    EXPECT_TRUE(trainer.resumed()) << unchanged.train.checkpoint;
  }
  expect_each_optimizer_setting_named_alone(dir);
}

}  // namespace
}  // namespace kiln
