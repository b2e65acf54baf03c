#include "cli/common_options.h"

#include <fmt/format.h>

#include "cli/data_options.h"
#include "cli/option_checks.h"
#include "cli/setting_options.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/zoo.h"
#include "settings/compile_settings.h"

namespace kiln::cli {

void add_common_options(CLI::App* app, CommonOptions& o) {
  app->add_option("--model,-m", o.model, fmt::format("model zoo name ({})", fmt::join(zoo::names(), ", ")))
      ->check(parsed_by([](const std::string& name) { zoo::by_name(name); }));
  add_setting_option(app, compile_setting("batch"), o.compile);
  app->add_option("--device", o.device, "auto (the first GPU when there is one, else the CPU), cpu, cuda or cuda:N")
      ->check(parsed_by([](const std::string& d) {
        if (d != "auto") parse_device_spec(d);
      }));
  for (const Setting& row : compile_settings())
    if (std::string(row.info.key) != "batch" && std::string(row.info.key) != "freeze" &&
        std::string(row.info.key) != "label_smoothing")
      add_setting_option(app, row, o.compile);
  app->add_option("--classes", o.classes, "number of classes, >= 1; -1: the model's, or the dataset's")
      ->check(number_in([](double v) { return v == -1 || v >= 1; }, "-1 or >= 1",
                        "use e.g. --classes 10, or -1 for the model's (plan) or the dataset's (train) count"));
  add_setting_option(app, compile_setting("freeze"), o.compile)->type_name("LAYER");
}

CompileOptions compile_options(const CommonOptions& o) {
  CompileOptions c = o.compile;
  const DeviceSpec spec = resolve_device(o.device);
  c.device = spec.device, c.device_index = spec.index;
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
