#pragma once
// The rows the commands that read a checkpoint share (kiln eval, predict, export): --checkpoint,
// and for those that run it (eval, predict) --device and --precision. One meaning, one wording:
// each command declares them over its own args struct with these builders, so that every one has
// the same flag, help, check and fix; `kiln settings` lists each under its command's field.
#include <string>

#include "cli/common_settings.h"
#include "settings/setting.h"

namespace kiln::cli {

// --checkpoint/-c FILE: a checkpoint kiln train wrote (export requires it; eval and predict take it
// or --model).
template <class Owner>
Setting checkpoint_file_setting(std::string Owner::*field, const char* member) {
  return text_setting<Owner>({.key = "checkpoint",
                              .flag = "--checkpoint",
                              .alias = "-c",
                              .help = "checkpoint written by kiln train",
                              .member = member},
                             field);
}

// --model/-m FILE.onnx for the commands that run a trained model (eval, predict): a model file and
// its weights instead of a checkpoint (cli/model_file_eval.h).
template <class Owner>
Setting model_file_setting(std::string Owner::*field, const char* member) {
  return text_setting<Owner>({.key = "model",
                              .flag = "--model",
                              .alias = "-m",
                              .help = "instead of --checkpoint: an ONNX file (FILE.onnx, as torch.onnx.export or kiln "
                                      "export writes it) whose architecture and weights run as they are",
                              .member = member},
                             field);
}

// --device: what the compiling commands' --device takes (common_settings' row: its help, check,
// fix and words), over `field`.
template <class Owner>
Setting checkpoint_device_setting(std::string Owner::*field, const char* member) {
  const Setting& common = common_setting("device");
  SettingInfo info = common.info;
  info.member = member;
  Setting row = text_setting<Owner>(info, field);
  row.check = common.check;
  return row;
}

// --precision: the checkpoint's (recorded by kiln train) unless given; the names parse_precision
// reads (fp64 on the CPU only, which the run says when it starts).
template <class Owner>
Setting checkpoint_precision_setting(std::string Owner::*field, const char* member) {
  return text_choice_setting<Owner>({.key = "precision",
                                     .flag = "--precision",
                                     .help = "fp32, fp16 or bf16 (or fp64 on cpu); default: the checkpoint's (fp32 for "
                                             "--model)",
                                     .member = member,
                                     .fix = "use e.g. --precision fp32, or leave it out for the checkpoint's"},
                                    field, {"fp32", "fp16", "bf16", "fp64"});
}

}  // namespace kiln::cli
