#include "cli/train_command.h"

#include <fmt/format.h>

#include <algorithm>

#include "cli/model_source.h"
#include "cli/named_setting_options.h"
#include "cli/option_checks.h"
#include "cli/setting_options.h"
#include "cli/train_run_settings.h"
#include "compile/loss_scale_def.h"
#include "settings/compile_settings.h"
#include "train/train_settings.h"

namespace kiln::cli {
namespace {

// Dynamic loss scaling's rows (CompileOptions::loss_scaling, PyTorch's GradScaler), declared by
// its family (src/ops/loss_scale/).
void add_loss_scale_options(CLI::App* app, CompileOptions& c) {
  add_setting_options(app, loss_scale_settings(), c, "Loss scaling");
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, CommonOptions& common, TrainArgs& t) {
  CLI::App* train = app.add_subcommand("train", "train a model on a dataset and report test accuracy");
  add_common_options(train, common);
  add_data_options(train, t.data, true);
  // The rows of train/train_settings.h (--epochs, the schedule, --seed), the optimizers' flags after
  // --epochs and label smoothing's (a compile setting, train's alone) before --seed.
  for (const Setting& row : train_settings()) {
    if (row.info.key == std::string("seed")) add_setting_option(train, compile_setting("label_smoothing"), common.compile);
    CLI::Option* option = add_setting_option(train, row, t.train);
    if (row.info.key == std::string("schedule")) option->type_name("TEXT");  // as --optimizer's
    if (row.info.key == std::string("epochs")) add_optimizer_options(train, t.optimizer);
  }
  // The run's own flags (cli/train_run_settings.h): --checkpoint, --json, --tensorboard, --resume,
  // --overwrite, --init-from, --new-head, --no-weights.
  add_named_setting_options(train, train_run_settings(), t,
                            {{"checkpoint", "FILE"}, {"json", "FILE"}, {"tensorboard", "DIR"}, {"init_from", "FILE"}});
  add_threads_option(train, t.backend);
  add_cpu_kernels_option(train, t.backend);
  add_cuda_options(train, t.backend);
  add_data_parallel_options(train, t.parallel, true);
  add_loss_scale_options(train, common.compile);
  return train;
}

void check_train_options(const TrainArgs& t, const std::string& model) {
  if (t.resume && t.checkpoint.empty())
    throw CLI::RequiresError("--resume needs --checkpoint FILE, the checkpoint to continue from; add "
                             "--checkpoint runs/run.safetensors or drop --resume",
                             CLI::ExitCodes::RequiresError);
  if (t.overwrite && t.checkpoint.empty())
    throw CLI::RequiresError("--overwrite needs --checkpoint FILE, the checkpoint to replace; add --checkpoint "
                             "runs/run.safetensors or drop --overwrite",
                             CLI::ExitCodes::RequiresError);
  if (t.new_head && t.init_from.empty() && !names_onnx_file(model))
    throw CLI::RequiresError("--new-head needs --init-from FILE or --model FILE.onnx, the weights whose classifier it "
                             "replaces; add --init-from resnet50.safetensors or drop --new-head",
                             CLI::ExitCodes::RequiresError);
  if (t.resume && t.overwrite)
    throw CLI::ValidationError("--resume and --overwrite exclude each other: --resume continues the run in "
                               "--checkpoint, --overwrite replaces it with a fresh one; drop one",
                               CLI::ExitCodes::ValidationError);
  // A warm-up as long as the run never reaches --lr (cosine never decays either): the run would end
  // at the peak of a schedule it never finished.
  const int warmup = t.train.schedule.warmup_epochs, epochs = t.train.epochs;
  if (warmup >= epochs)
    throw CLI::ValidationError(
        "--warmup", fmt::format("{} is not shorter than the run (--epochs {}): the learning rate would only "
                                "rise, reaching --lr {} at best at the last step, and never decay; use a warm-up "
                                "shorter than the run, e.g. --warmup {}",
                                warmup, epochs, t.train.schedule.lr,
                                epochs >= 2 ? fmt::format("{} (or 0 for none)", std::max(1, epochs / 10))
                                            : std::string("0 (none), or more --epochs")));
  check_optimizer_options(t.optimizer);
}

}  // namespace kiln::cli
