#include "cli/train_command.h"

#include <fmt/format.h>

#include <algorithm>

#include "cli/option_checks.h"
#include "cli/setting_options.h"
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
  train->add_option("--checkpoint", t.checkpoint,
                    "safetensors checkpoint written atomically after every epoch; its folder must exist; <file>.lock "
                    "guards it while training; an existing file is refused unless --resume or --overwrite")
      ->type_name("FILE");
  train->add_option("--json", t.json, "append one JSON line per epoch (times, loss, accuracies) to this file")
      ->type_name("FILE");
  train->add_option("--tensorboard", t.tensorboard,
                    "write TensorBoard event files into this folder (made when missing; a new file per run): per "
                    "epoch train/loss, train/accuracy, test/accuracy, test/top5, lr, images_per_second (and "
                    "loss_scale in fp16), and train/step_loss at the optimizer steps the loss is read")
      ->type_name("DIR");
  train->add_flag("--resume", t.resume,
                  "continue from --checkpoint if it exists, else start fresh (needs --checkpoint); the run's settings "
                  "must match the checkpoint's, only --epochs may change");
  train->add_flag("--overwrite", t.overwrite,
                  "start fresh even though --checkpoint exists: it is replaced after the first epoch (needs "
                  "--checkpoint; not with --resume)");
  train->add_option("--init-from", t.init_from,
                    "start from PyTorch weights: a state_dict saved as safetensors (tools/torch_to_safetensors.py "
                    "writes torchvision's); names and layouts map as torchvision names its models")
      ->type_name("FILE");
  train->add_flag("--new-head", t.new_head,
                  "with --init-from: leave the last linear layer as initialized, for another number of classes "
                  "(fine-tuning)");
  add_threads_option(train, t.backend);
  add_cpu_kernels_option(train, t.backend);
  add_cuda_options(train, t.backend);
  add_data_parallel_options(train, t.parallel, true);
  add_loss_scale_options(train, common.compile);
  return train;
}

void check_train_options(const TrainArgs& t) {
  if (t.resume && t.checkpoint.empty())
    throw CLI::RequiresError("--resume needs --checkpoint FILE, the checkpoint to continue from; add "
                             "--checkpoint runs/run.safetensors or drop --resume",
                             CLI::ExitCodes::RequiresError);
  if (t.overwrite && t.checkpoint.empty())
    throw CLI::RequiresError("--overwrite needs --checkpoint FILE, the checkpoint to replace; add --checkpoint "
                             "runs/run.safetensors or drop --overwrite",
                             CLI::ExitCodes::RequiresError);
  if (t.new_head && t.init_from.empty())
    throw CLI::RequiresError("--new-head needs --init-from FILE, the weights whose classifier it replaces; add "
                             "--init-from resnet50.safetensors or drop --new-head",
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
