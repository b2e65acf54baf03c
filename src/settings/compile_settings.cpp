#include "settings/compile_settings.h"

#include "kiln/error.h"

namespace kiln {
namespace {

// A text setting that means something only when given (--freeze): a checkpoint's recipe records it
// only then, so the recipes of runs without it stay as they were before it existed.
Setting recorded_when_set(Setting row) {
  row.applies = [read = row.read](const void* options) { return !read(options).empty(); };
  return row;
}

}  // namespace

const std::vector<Setting>& compile_settings() {
  using C = CompileOptions;
  static const std::vector<Setting> rows = {
      count_setting<C>({.key = "batch",
                        .flag = "--batch",
                        .alias = "-b",
                        .help = "batch size, >= 1",
                        .member = "CompileOptions::batch",
                        .fix = "use e.g. --batch 64",
                        .compared_on_resume = true,
                        .reported = true,
                        .plan_words = "batch"},
                       &C::batch, {1, kUnbounded}),
      choice_setting<C, Precision>({.key = "precision",
                                    .flag = "--precision",
                                    .help = "fp32 (cpu, cuda), fp16 or bf16 (cuda)",
                                    .member = "CompileOptions::precision",
                                    .compared_on_resume = true,
                                    .reported = true,
                                    .plan_words = "precision"},
                                   &C::precision,
                                   {{"fp32", Precision::FP32},
                                    {"fp16", Precision::FP16},
                                    {"bf16", Precision::BF16},
                                    {"fp64", Precision::FP64}}),
      switch_setting<C>({.key = "fuse_cbr",
                         .flag = "--fuse",
                         .help = "--no-fuse: run Conv, BN, activations and residual adds as separate layers, cbr() ones, "
                                 "ResNet block ends and every Conv -> BN -> activation included (same tensor names, so "
                                 "checkpoints move between the two)",
                         .member = "CompileOptions::fuse_cbr",
                         .reported = true,
                         .flag_pair = true,
                         .plan_words = "cbr fusion"},
                        &C::fuse_cbr),
      switch_setting<C>({.key = "fuse_seams",
                         .flag = "--fuse-seams",
                         .help = "fusion across layers: a CBR whose output feeds only CBR or conv_bn layers leaves its "
                                 "BN+ReLU to them, applied as they read its convolution's output (`kiln plan` shows the "
                                 "seams); less memory",
                         .member = "CompileOptions::fuse_seams",
                         .reported = true,
                         .flag_pair = true,
                         .plan_words = "fusion across layers"},
                        &C::fuse_seams),
      recorded_when_set(text_setting<C>({.key = "freeze",
                       .flag = "--freeze",
                       .help = "fine-tuning: freeze the layers up to and including this one (a layer or a block, e.g. "
                               "layer3; `kiln plan` lists the names): eval-mode BatchNorm, no gradient, no update",
                       .member = "CompileOptions::freeze",
                       .compared_on_resume = true},
                      &C::freeze)),
      real_setting<C>({.key = "label_smoothing",
                       .flag = "--label-smoothing",
                       .help = "label smoothing for cross-entropy, in [0, 1)",
                       .member = "CompileOptions::label_smoothing",
                       .fix = "use e.g. --label-smoothing 0.1, or 0 for none",
                       .compared_on_resume = true},
                      &C::label_smoothing, {0, 1, false, true}),
  };
  return rows;
}

const Setting& compile_setting(const char* key) {
  const Setting* row = find_setting(compile_settings(), key);
  if (!row) fail("internal: no compile setting '{}'", key);
  return *row;
}

}  // namespace kiln
