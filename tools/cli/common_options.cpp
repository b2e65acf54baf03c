#include "cli/common_options.h"

#include <fmt/format.h>

#include "cli/common_settings.h"
#include "cli/setting_options.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "settings/compile_settings.h"

namespace kiln::cli {

void add_common_options(CLI::App* app, CommonOptions& o) {
  // --help's order: the model, the batch, the device, the other compile settings, the classes and
  // --freeze (label smoothing is train's).
  // TEXT, as --optimizer shows: the help lists the names, which would crowd the flag column.
  add_setting_option(app, common_setting("model"), o)->type_name("TEXT");
  add_setting_option(app, compile_setting("batch"), o.compile);
  add_setting_option(app, common_setting("device"), o);
  for (const Setting& row : compile_settings())
    if (std::string(row.info.key) != "batch" && std::string(row.info.key) != "freeze" &&
        std::string(row.info.key) != "label_smoothing")
      add_setting_option(app, row, o.compile);
  add_setting_option(app, common_setting("classes"), o);
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
