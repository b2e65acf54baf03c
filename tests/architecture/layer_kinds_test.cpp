// Every layer kind — the model language's (kiln/layer_vocabulary.h) and the ones the fusions add,
// which their families declare (src/ops/<family>/<family>_layer_kinds.def, collected by the build
// into src/ir/fused_layer_kinds.h) — has a distinct name and exactly one lowering
// (`extern const LayerDef k<Name>Layer` in a *_layer.cpp, collected by cmake/layer_defs.cmake).
// A kind declared without its lowering, or a lowering file the build no longer finds, fails here
// by name.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "compile/layer_def.h"
#include "ir/fused_layer_kinds.h"
#include "kiln/error.h"

namespace kiln {
namespace {

// The kinds a lowered graph may hold: the model language's less the composites that expansion
// removes (Sequence, Residual), and every fused kind.
std::vector<LayerKind> lowered_kinds() {
  std::vector<LayerKind> kinds;
  for (int k = 0; k < static_cast<int>(LayerKind::Sequence); ++k) kinds.push_back(static_cast<LayerKind>(k));
  for (int i = 0; i < fused_layer::kCount; ++i) kinds.push_back(fused_layer::kind_at(i));
  return kinds;
}

TEST(LayerKinds, EveryKindHasADistinctName) {
  std::set<std::string> names;
  for (int k = 0; k <= static_cast<int>(LayerKind::Residual); ++k) {
    const std::string name = layer_kind_name(static_cast<LayerKind>(k));
    EXPECT_NE(name, "?") << "kind " << k;
    EXPECT_TRUE(names.insert(name).second) << name << " named twice";
  }
  for (int i = 0; i < fused_layer::kCount; ++i) {
    const LayerKind kind = fused_layer::kind_at(i);
    ASSERT_TRUE(is_fused_layer_kind(kind));
    ASSERT_NE(fused_layer_kind_name(kind), nullptr) << "fused kind " << i;
    EXPECT_STREQ(layer_kind_name(kind), fused_layer_kind_name(kind));
    EXPECT_TRUE(names.insert(layer_kind_name(kind)).second) << layer_kind_name(kind) << " named twice";
  }
  // The resblock family's kinds are among them, under the names `kiln plan` prints.
  EXPECT_STREQ(layer_kind_name(fused_layer::ConvBN), "conv_bn");
  EXPECT_STREQ(layer_kind_name(fused_layer::BnAddRelu), "bn_add_relu");
  EXPECT_FALSE(is_fused_layer_kind(LayerKind::CBR));  // the model language may write a CBR itself
  // Past both lists: no name.
  const LayerKind past = fused_layer::kind_at(fused_layer::kCount);
  EXPECT_STREQ(layer_kind_name(past), "?");
  EXPECT_STREQ(layer_kind_name(static_cast<LayerKind>(static_cast<int>(LayerKind::Residual) + 1)), "?");
}

TEST(LayerKinds, EveryLoweredKindHasExactlyOneLowering) {
  std::map<LayerKind, int> defs;
  for (const LayerDef* def : all_layer_defs()) ++defs[def->kind];
  for (LayerKind kind : lowered_kinds()) {
    EXPECT_EQ(defs[kind], 1) << layer_kind_name(kind);
    EXPECT_NO_THROW(layer_def(kind)) << layer_kind_name(kind);
  }
  EXPECT_EQ(defs.size(), lowered_kinds().size()) << "a lowering for a kind that is never lowered";
  // The lookup does fail for a kind without one: the composites are expanded before lowering.
  EXPECT_THROW(layer_def(LayerKind::Sequence), Error);
  EXPECT_THROW(layer_def(LayerKind::Residual), Error);
}

}  // namespace
}  // namespace kiln
