#include "cli/train_run_settings.h"

#include "kiln/error.h"

namespace kiln::cli {

const std::vector<Setting>& train_run_settings() {
  using T = TrainArgs;
  static const std::vector<Setting> rows = {
      text_setting<T>({.key = "checkpoint",
                       .flag = "--checkpoint",
                       .alias = "-c",
                       .help = "safetensors checkpoint written atomically after every epoch; its folder must exist; "
                               "<file>.lock guards it while training; an existing file is refused unless --resume or "
                               "--overwrite",
                       .member = "TrainArgs::checkpoint"},
                      &T::checkpoint),
      text_setting<T>({.key = "json",
                       .flag = "--json",
                       .help = "append one JSON line per epoch (times, loss, accuracies) to this file",
                       .member = "TrainArgs::json"},
                      &T::json),
      text_setting<T>({.key = "tensorboard",
                       .flag = "--tensorboard",
                       .help = "write TensorBoard event files into this folder (made when missing; a new file per "
                               "run): per epoch train/loss, train/accuracy, test/accuracy, test/top5, lr, "
                               "images_per_second (and loss_scale in fp16), and train/step_loss at the optimizer "
                               "steps the loss is read",
                       .member = "TrainArgs::tensorboard"},
                      &T::tensorboard),
      switch_setting<T>({.key = "resume",
                         .flag = "--resume",
                         .help = "continue from --checkpoint if it exists, else start fresh (needs --checkpoint); the "
                                 "run's settings must match the checkpoint's, only --epochs may change",
                         .member = "TrainArgs::resume",
                         .flag_only = true},
                        &T::resume),
      switch_setting<T>({.key = "overwrite",
                         .flag = "--overwrite",
                         .help = "start fresh even though --checkpoint exists: it is replaced after the first epoch "
                                 "(needs --checkpoint; not with --resume)",
                         .member = "TrainArgs::overwrite",
                         .flag_only = true},
                        &T::overwrite),
      text_setting<T>({.key = "init_from",
                       .flag = "--init-from",
                       .help = "start from PyTorch weights: a state_dict saved as safetensors "
                               "(tools/torch_to_safetensors.py writes torchvision's); names and layouts map as "
                               "torchvision names its models",
                       .member = "TrainArgs::init_from"},
                      &T::init_from),
      switch_setting<T>({.key = "new_head",
                         .flag = "--new-head",
                         .help = "with --init-from or --model FILE.onnx: leave the last linear layer as initialized, "
                                 "for other classes (fine-tuning)",
                         .member = "TrainArgs::new_head",
                         .flag_only = true},
                        &T::new_head),
      switch_setting<T>({.key = "no_weights",
                         .flag = "--no-weights",
                         .help = "with --model FILE.onnx: train the file's architecture from kiln's initialization "
                                 "instead of the weights the file holds",
                         .member = "TrainArgs::no_weights",
                         .flag_only = true},
                        &T::no_weights),
  };
  return rows;
}

const Setting& train_run_setting(const char* key) {
  const Setting* row = find_setting(train_run_settings(), key);
  if (!row) fail("internal: no train run setting '{}'", key);
  return *row;
}

}  // namespace kiln::cli
