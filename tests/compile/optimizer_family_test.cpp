// The optimizer families (compile/optimizer_family.h), as the build collects them: each has a name,
// settings whose keys, flags and texts are the recipe's, and state no other family claims;
// compile() refuses an unknown optimizer, a key its family does not take, a value out of range
// and settings its family refuses together, naming them; a config's unset keys take the
// family's defaults.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "compile/optimizer_family.h"
#include "compile/optimizer_settings.h"
#include "kiln/compile.h"
#include "ops/optimizer/optimizer_contract.h"
#include "runtime/op_cost.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::expect_error;

Blueprint small_net() {
  Blueprint b("small");
  b.input(6, 6, 1).conv(2, 3, 1, 1, false, "conv1").bn("bn1").relu("relu1");
  b.flatten("flatten").fc(3, true, "fc");
  return b;
}

CompileOptions with_optimizer(const OptimizerConfig& config) {
  CompileOptions o;
  o.batch = 2;
  o.optimizer = config;
  return o;
}

TEST(OptimizerFamilies, TheBuildCollectsTheTrainersOptimizersByName) {
  std::set<std::string> names;
  for (const OptimizerFamily* f : all_optimizer_families()) names.insert(f->name);
  for (const char* name : {"sgd", "adamw", "lars"}) EXPECT_TRUE(names.count(name)) << name;
  EXPECT_EQ(names.size(), all_optimizer_families().size()) << "two families of one name";
  EXPECT_STREQ(optimizer_family("adamw").name, "adamw");
  EXPECT_EQ(OptimizerConfig{}.name, "sgd");  // the library's default optimizer exists
  EXPECT_NO_THROW(optimizer_family(OptimizerConfig{}.name));
}

TEST(OptimizerFamilies, EachKeepsItsOwnStateAndRowsThatApplyToItAlone) {
  std::set<std::string> states;
  for (const OptimizerFamily* f : all_optimizer_families()) {
    SCOPED_TRACE(f->name);
    EXPECT_TRUE(f->help && *f->help);
    EXPECT_TRUE(f->lower_update);
    for (const char* state : f->state)
      if (state) {
        EXPECT_TRUE(states.insert(state).second) << state << " is claimed twice";
        EXPECT_EQ(optimizer_of_state(state), f);
      }
    OptimizerConfig mine, other;
    mine.name = f->name, other.name = f->name == std::string("sgd") ? "adamw" : "sgd";
    std::set<std::string> keys;
    for (const Setting& row : f->settings()) {
      EXPECT_TRUE(keys.insert(row.info.key).second) << row.info.key;
      EXPECT_STREQ(row.decided_by, "optimizer");
      EXPECT_TRUE(row.applies(&mine)) << row.info.key;
      EXPECT_FALSE(row.applies(&other)) << row.info.key;
      EXPECT_EQ(row.info.member, "CompileOptions::optimizer.values[\"" + std::string(row.info.key) + "\"]");
      EXPECT_TRUE(row.info.compared_on_resume) << row.info.key;
      // What a row reads back is what was written, and an unset key reads as its default.
      OptimizerConfig c = mine;
      EXPECT_EQ(row.read(&c), setting_default_text(row));
      const std::string other_value = row.type == SettingType::Switch ? "true" : "0.5";
      row.write(&c, other_value);
      EXPECT_EQ(row.read(&c), other_value);
    }
  }
  EXPECT_EQ(optimizer_of_state("optimizer.nothing"), nullptr);
}

TEST(OptimizerFamilies, TheRowsReadTheRecipesTexts) {
  // The texts the checkpoints of the optimizers before the families recorded (recipe.<key>).
  const OptimizerConfig sgd{"sgd"}, adamw{"adamw"}, lars{"lars"};
  auto text = [](const OptimizerConfig& c, const char* key) {
    return find_setting(optimizer_family(c.name).settings(), key)->read(&c);
  };
  EXPECT_EQ(text(sgd, "momentum"), "0.9");
  EXPECT_EQ(text(sgd, "nesterov"), "false");
  EXPECT_EQ(text(sgd, "weight_decay"), "0");
  EXPECT_EQ(text(adamw, "beta1"), "0.9");
  EXPECT_EQ(text(adamw, "beta2"), "0.999");
  EXPECT_EQ(text(adamw, "eps"), "1e-08");
  EXPECT_EQ(text(lars, "trust_coefficient"), "0.001");
  EXPECT_EQ(text(lars, "lars_skip_1d"), "true");
  OptimizerConfig set = sgd;
  set.set("weight_decay", 5e-4).set("nesterov", 1);
  EXPECT_EQ(text(set, "weight_decay"), "0.0005");
  EXPECT_EQ(text(set, "nesterov"), "true");
}

TEST(OptimizerFamilies, CompileRefusesWhatNoFamilyTakesNamingIt) {
  expect_error([] { compile(small_net(), with_optimizer({"lamb"})); },
               {"unknown optimizer 'lamb'", "CompileOptions::optimizer.name", "adamw", "lars", "sgd"});
  expect_error([] { compile(small_net(), with_optimizer(OptimizerConfig{"adamw"}.set("momentum", 0.9))); },
               {"the adamw optimizer has no setting 'momentum'", "beta1", "weight_decay"});
  expect_error([] { compile(small_net(), with_optimizer(OptimizerConfig{"sgd"}.set("momentum", 1.5))); },
               {"the sgd optimizer's momentum", "is 1.5", "in [0, 1)", "--momentum 0.9"});
  expect_error([] { compile(small_net(), with_optimizer(OptimizerConfig{"sgd"}.set("nesterov", 2))); },
               {"the sgd optimizer's nesterov", "is 2", "0 or 1"});
  expect_error([] { compile(small_net(), with_optimizer(OptimizerConfig{"adamw"}.set("weight_decay", -1))); },
               {"the adamw optimizer's weight_decay", "a finite number >= 0"});
  expect_error(
      [] { compile(small_net(), with_optimizer(OptimizerConfig{"sgd"}.set("momentum", 0).set("nesterov", 1))); },
      {"the sgd optimizer", "Nesterov", "momentum > 0", "--no-nesterov"});
}

TEST(OptimizerFamilies, TheUpdateTakesTheConfigsValuesAndTheDefaultsForTheRest) {
  const Program p = compile(small_net(), with_optimizer(OptimizerConfig{"adamw"}.set("beta1", 0.8)));
  ASSERT_EQ(p.update.size(), 1u);
  EXPECT_EQ(p.update[0].kind, OpKind::ADAMW_UPDATE);
  const AdamWUpdate<TensorId> op = op_fields<AdamWUpdate>(p.update[0]);
  EXPECT_EQ(op.beta1, 0.8f);
  EXPECT_EQ(op.beta2, 0.999f);
  EXPECT_EQ(op.eps, 1e-8f);
  EXPECT_EQ(op.weight_decay, 0.f);
  EXPECT_EQ(optimizer_value(p.options.optimizer, "beta1"), 0.8);
  // Its state regions, in the parameters' layout, are the program's checkpointed optimizer state.
  ASSERT_EQ(p.opt_state_regions.size(), 2u);
  EXPECT_EQ(p.tensors[p.opt_state_regions[0]].name, "optimizer.exp_avg");
  EXPECT_EQ(p.tensors[p.opt_state_regions[1]].shape, p.tensors[p.param_region].shape);
}

}  // namespace
}  // namespace kiln
