// The lookups of the loss and the loss scaling compile() lowers (loss_def.h, loss_scale_def.h).
#include "compile/loss_def.h"

#include "compile/loss_scale_def.h"
#include "kiln/error.h"

namespace kiln {
namespace {

// The one element of a generated list of families.
template <class Def>
const Def& only(const std::vector<const Def*>& defs, const char* what) {
  if (defs.size() != 1)
    fail("internal: compile() lowers the one {} family there is, but the build found {}; name the chosen one in "
         "CompileOptions",
         what, defs.size());
  return *defs.front();
}

}  // namespace

const LossDef& loss_def() { return only(all_loss_defs(), "loss"); }

const LossScaleDef& loss_scale_def() { return only(all_loss_scale_defs(), "loss scaling"); }

const std::vector<Setting>& loss_scale_settings() {
  static const std::vector<Setting> rows = settings_within(loss_scale_def().settings(), &CompileOptions::loss_scaling);
  return rows;
}

}  // namespace kiln
