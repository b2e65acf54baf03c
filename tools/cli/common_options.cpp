#include "cli/common_options.h"

#include <fmt/format.h>

#include "cli/data_options.h"
#include "cli/option_checks.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/zoo.h"

namespace kiln::cli {

void add_common_options(CLI::App* app, CommonOptions& o) {
  app->add_option("--model,-m", o.model, fmt::format("model zoo name ({})", fmt::join(zoo::names(), ", ")))
      ->check(parsed_by([](const std::string& name) { zoo::by_name(name); }));
  app->add_option("--batch,-b", o.batch, "batch size, >= 1")->check(at_least(1, "use e.g. --batch 64"));
  app->add_option("--device", o.device, "auto (the first GPU when there is one, else the CPU), cpu, cuda or cuda:N")
      ->check(parsed_by([](const std::string& d) {
        if (d != "auto") parse_device_spec(d);
      }));
  app->add_option("--precision", o.precision, "fp32 (cpu, cuda), fp16 or bf16 (cuda)")
      ->check(parsed_by([](const std::string& p) { parse_precision(p); }));
  app->add_flag("--no-fuse", o.no_fuse,
                "run Conv, BN, ReLU and residual adds as separate layers, cbr() ones and ResNet block ends "
                "included (same tensor names, so checkpoints move between the two)");
  app->add_flag("--fuse-seams", o.fuse_seams,
                "fusion across layers: a CBR whose output feeds only CBR or conv_bn layers leaves its BN+ReLU to "
                "them, applied as they read its convolution's output (`kiln plan` shows the seams)");
  app->add_option("--fuse-grad-sums", o.fuse_grad_sums,
                  "1: a ResNet block end's backward adds the two gradients of its output as it reads them, where "
                  "a GRAD_SUM pass would write their sum first (the same values, one tensor pass fewer per block; "
                  "the default); 0: the GRAD_SUM pass")
      ->type_name("0|1")
      ->check(number_in([](double v) { return v == 0 || v == 1; }, "0 or 1",
                        "use --fuse-grad-sums 1 (the default) to fuse the sums, 0 to keep them"));
  app->add_option("--classes", o.classes, "number of classes, >= 1; -1: the model's, or the dataset's")
      ->check(number_in([](double v) { return v == -1 || v >= 1; }, "-1 or >= 1",
                        "use e.g. --classes 10, or -1 for the model's (plan) or the dataset's (train) count"));
  app->add_option("--freeze", o.freeze,
                  "fine-tuning: freeze the layers up to and including this one (a layer or a block, e.g. layer3; "
                  "`kiln plan` lists the names): eval-mode BatchNorm, no gradient, no update")
      ->type_name("LAYER");
}

CompileOptions compile_options(const CommonOptions& o) {
  CompileOptions c;
  c.batch = o.batch;
  const DeviceSpec spec = resolve_device(o.device);
  c.device = spec.device, c.device_index = spec.index;
  c.precision = parse_precision(o.precision);
  c.fuse_cbr = !o.no_fuse;
  c.fuse_seams = o.fuse_seams;
  c.fuse_grad_sums = o.fuse_grad_sums;
  c.freeze = o.freeze;
  return c;
}

std::string device_label(const CompileOptions& c) {
  if (c.device == Device::CPU) return "cpu";
  return fmt::format("cuda:{}", c.device_index);
}

std::ofstream json_appender(const std::string& path) {
  std::ofstream out;
  if (path.empty()) return out;
  out.open(path, std::ios::app);
  if (!out) fail("cannot open --json file '{}' for appending; check that its folder exists", path);
  return out;
}

}  // namespace kiln::cli
