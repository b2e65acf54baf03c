#include "cli/bench_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "cli/bench_settings.h"
#include "cli/model_source.h"
#include "cli/named_setting_options.h"
#include "cli/setting_report.h"
#include "core/cpu_kernels.h"
#include "kiln/threads.h"
#include "settings/compile_settings.h"
#include "settings/cuda_settings.h"

namespace kiln::cli {
namespace {

std::string gib(size_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / double(1ull << 30)); }

// The profiled step: time against floor by op kind, then the ops furthest above their floors.
void print_profile(const BenchResult& r) {
  std::map<std::string, std::array<double, 3>> by_kind;  // ms, floor ms, count
  double total = 0, floor = 0;
  for (const OpProfile& op : r.profile) {
    auto& k = by_kind[op.kind];
    k[0] += op.ms, k[1] += op.floor_ms, k[2] += 1;
    total += op.ms, floor += op.floor_ms;
  }
  fmt::print("profiled step, op by op with a wait after each: {:.2f} ms (floor {:.2f} ms); by op kind:\n", total, floor);
  std::vector<std::pair<std::string, std::array<double, 3>>> kinds(by_kind.begin(), by_kind.end());
  std::sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second[0] > b.second[0]; });
  for (const auto& [kind, k] : kinds)
    fmt::print("  {:<18} {:4.0f} ops {:8.2f} ms  floor {:8.2f} ms  gap {:7.2f} ms\n", kind, k[2], k[0], k[1], k[0] - k[1]);
  std::vector<const OpProfile*> ops;
  for (const OpProfile& op : r.profile) ops.push_back(&op);
  std::sort(ops.begin(), ops.end(), [](auto* a, auto* b) { return a->ms - a->floor_ms > b->ms - b->floor_ms; });
  fmt::print("largest gaps to the floor:\n");
  for (size_t i = 0; i < std::min<size_t>(12, ops.size()); ++i)
    fmt::print("  {:<8} {:<14} {:<28} {:7.3f} ms  floor {:7.3f} ms ({:.1f} GFLOP, {:.1f} MB)\n", ops[i]->list,
               ops[i]->kind, ops[i]->layer, ops[i]->ms, ops[i]->floor_ms, ops[i]->flops * 1e-9, ops[i]->bytes * 1e-6);
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app, CommonOptions& common, BenchArgs& b) {
  CLI::App* bench = app.add_subcommand(
      "bench", "train on synthetic data already on the device and print images/s, memory and time to the first step");
  add_common_options(bench, common);
  // Its own flags (cli/bench_settings.h): --steps, --warmup, --seed, --profile, the peaks, --json.
  add_named_setting_options(bench, bench_settings(), b, {{"json", "FILE"}});
  add_threads_option(bench, b.backend);
  add_cpu_kernels_option(bench, b.backend);
  add_cuda_options(bench, b.backend);
  add_data_parallel_options(bench, b.parallel, false);
  return bench;
}

int run_bench(const CommonOptions& o, const BenchArgs& b) {
  CompileOptions c = compile_options(o);
  c.cpu = b.backend.cpu;  // the CPU backend sizes the pool with it
  c.optimizer = {"sgd"};  // PyTorch's recipe in bench/torch_models.py
  c.optimizer.set("momentum", 0.9).set("nesterov", 1).set("weight_decay", 1e-4);
  c.cuda = b.backend.cuda;
  const std::shared_ptr<ProcessGroup> group = join_ranks_if_launched(b.parallel, c);
  std::ofstream json = json_appender(group && group->rank() != 0 ? std::string() : b.json);  // rank 0 writes
  // (a bad path fails before the benchmark runs)
  const ModelSource source = resolve_model(o.model, o.classes, b.image_size, b.image_size);
  if (b.image_size > 0) {
    const std::optional<Shape>& own = source.blueprint.input_hwc();
    c.input_hwc = {b.image_size, b.image_size, own ? (*own)[2] : 3};
  }
  if (!group || group->rank() == 0) print_model_notes(source);
  const BenchResult r = bench_training(source.blueprint, c, b.bench);
  const auto [lo, hi] = std::minmax_element(r.step_ms.begin(), r.step_ms.end());
  const int ranks = group ? group->ranks() : 1;
  const std::string where = ranks > 1 ? fmt::format("{} GPUs (data parallel)", ranks) : device_label(c);
  fmt::print("kiln bench: {} on {} {}, batch {}{} at {}x{}: {:.0f} img/s (median step {:.2f} ms of {}, {:.2f}-{:.2f})\n",
             o.model, where, precision_name(o.compile.precision), o.compile.batch, ranks > 1 ? " per GPU" : "",
             r.input_hwc[0], r.input_hwc[1], r.images_per_second,
             r.median_step_ms, r.step_ms.size(), *lo, *hi);
  fmt::print("first step after {:.1f} s; memory: planned {} + workspace {}, device {}; loss {:.4f} -> {:.4f}\n",
             r.first_step_seconds, gib(r.planned_bytes), gib(r.workspace_bytes),
             c.device == Device::CUDA ? gib(r.device_bytes) : std::string("n/a"), r.first_loss, r.last_loss);
  fmt::print("first step's parts: compile {:.1f} s, backend {:.1f} s, arena {:.1f} s, initial state {:.1f} s, preparing ops "
             "{:.1f} s, the step {:.1f} s\n",
             r.compile_seconds, r.start.backend, r.start.allocate, r.start.init_state, r.start.prepare_ops,
             r.step_one_seconds);
  if (b.bench.profile) print_profile(r);
  if (json.is_open()) {
    nlohmann::json ops = nlohmann::json::array();
    for (const OpProfile& op : r.profile)
      ops.push_back({{"list", op.list}, {"kind", op.kind}, {"layer", op.layer}, {"ms", op.ms}, {"flops", op.flops},
                     {"bytes", op.bytes}, {"floor_ms", op.floor_ms}});
    nlohmann::json j = {{"framework", "kiln"},
                              {"profile", ops},
                              {"model", o.model},
                              {"input", r.input_hwc},
                              {"device", device_label(c)},
                              {"ranks", ranks},
                              {"threads", c.device == Device::CPU ? kiln::threads() : 0},
                              {"cpu_kernels", c.device == Device::CPU ? cpu_kernels_name(cpu_kernels()) : ""},
                              {"images_per_second", r.images_per_second},
                              {"median_step_ms", r.median_step_ms},
                              {"step_ms", r.step_ms},
                              {"first_step_seconds", r.first_step_seconds},
                              {"start_seconds",
                               {{"compile", r.compile_seconds},
                                {"backend", r.start.backend},
                                {"allocate", r.start.allocate},
                                {"init_state", r.start.init_state},
                                {"prepare_ops", r.start.prepare_ops},
                                {"step_one", r.step_one_seconds}}},
                              {"planned_bytes", r.planned_bytes},
                              {"workspace_bytes", r.workspace_bytes},
                              {"device_bytes", r.device_bytes},
                              {"first_loss", r.first_loss},
                              {"last_loss", r.last_loss}};
    // Its own reported rows (--warmup), under their keys.
    add_reported_settings(j, bench_settings(), &b);
    // The compile settings plan and bench report (settings/compile_settings.h), under their keys.
    add_reported_settings(j, compile_settings(), &c);
    // Every numeric CUDA setting under its field's name, so any of them can be compared
    // (gpu_check.sh option-ab): the rows of settings/cuda_settings.h mark them reported.
    add_reported_settings(j, cuda_settings(), &c.cuda);
    json << j.dump() << std::endl;
  }
  if (group) group->leave();
  return 0;
}

}  // namespace kiln::cli
