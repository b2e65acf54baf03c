#include "cli/checkpoint_model.h"

#include <fmt/format.h>

#include <sstream>

#include "cli/data_settings.h"
#include "cli/model_source.h"
#include "kiln/checkpoint.h"
#include "kiln/device.h"
#include "kiln/error.h"

namespace kiln::cli {
namespace {

std::string required(const CheckpointModel& m, const std::string& key) {
  std::string value = m.recipe(key);
  if (value.empty())
    fail("checkpoint '{}' does not record its '{}'; use a checkpoint written by kiln train", m.path, key);
  return value;
}

int positive_int(const CheckpointModel& m, const std::string& key) {
  const std::string text = required(m, key);
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v > 0) return v;
  } catch (const std::logic_error&) {
  }
  fail("checkpoint '{}' has a malformed '{}': '{}'", m.path, key, text);
}

SampleShape input_shape(const CheckpointModel& m) {
  const std::string text = required(m, "input");
  SampleShape s;
  char x1 = 0, x2 = 0;
  std::istringstream in(text);
  if (!(in >> s.height >> x1 >> s.width >> x2 >> s.channels) || x1 != 'x' || x2 != 'x' || s.height <= 0 ||
      s.width <= 0 || s.channels <= 0)
    fail("checkpoint '{}' has a malformed 'input': '{}' (HxWxC expected)", m.path, text);
  return s;
}

}  // namespace

std::string CheckpointModel::recipe(const std::string& key) const {
  auto it = metadata.find("recipe." + key);
  return it == metadata.end() ? std::string() : it->second;
}

CheckpointModel read_checkpoint_model(const std::string& path) {
  CheckpointModel m;
  m.path = path;
  m.metadata = load_safetensors(path).metadata;
  m.model = required(m, "model");
  m.classes = positive_int(m, "classes");
  m.batch = positive_int(m, "batch");
  m.precision = required(m, "precision");
  m.input = input_shape(m);
  return m;
}

void adopt_data_recipe(const CheckpointModel& m, const CLI::App* cmd, DataArgs& d) {
  for (const Setting& row : data_settings()) {
    if (!row.info.eval_adopts) continue;
    const std::string value = m.recipe(row.info.key);
    const CLI::Option* given = cmd ? cmd->get_option_no_throw(row.info.flag) : nullptr;
    if (value.empty() || (given && given->count() != 0)) continue;
    if (const std::string why = row.refusal(value); !why.empty())
      fail("checkpoint '{}' has a malformed '{}': {}; give {} on the command line", m.path, row.info.key, why,
           row.info.flag);
    row.write(&d, value);
  }
}

std::unique_ptr<Trainer> evaluation_trainer(const CheckpointModel& m, const SampleShape& input, const EvalRun& run) {
  CompileOptions c;
  c.batch = run.batch > 0 ? run.batch : m.batch;
  const DeviceSpec spec = resolve_device(run.device);
  c.device = spec.device, c.device_index = spec.index;
  c.precision = parse_precision(run.precision.empty() ? m.precision : run.precision);
  c.input_hwc = {input.height, input.width, input.channels};
  TrainOptions t;
  t.workers = run.workers;
  // A model file's run is rebuilt from the file it records, refused once the file changed.
  const ModelSource model = recorded_model(m.path, m.metadata, m.classes, input.height, input.width);
  auto trainer = std::make_unique<Trainer>(model.blueprint, c, t);
  trainer->load_weights(m.path);
  return trainer;
}

std::string class_name(const Trainer& trainer, int label) {
  const std::vector<std::string>& names = trainer.class_names();
  return label >= 0 && label < int(names.size()) ? names[size_t(label)] : std::to_string(label);
}

}  // namespace kiln::cli
