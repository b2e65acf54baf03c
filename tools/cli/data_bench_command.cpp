#include "cli/data_bench_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/data_bench_settings.h"
#include "cli/named_setting_options.h"
#include "data/gpu_decode/gpu_decode_loader.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"

namespace kiln::cli {

namespace {

void dump_samples(const SampleSource& source, const DataBenchArgs& a) {
  std::ofstream pixels(a.dump, std::ios::binary), names(a.dump + ".names");
  if (!pixels || !names) fail("cannot write --dump file '{}'; check that its folder exists", a.dump);
  std::vector<uint8_t> sample(source.shape().size());
  const int64_t n = std::min<int64_t>(a.dump_count, source.count());
  for (int64_t i = 0; i < n; ++i) {
    source.write_sample(i, a.seed, a.epoch, sample.data());
    pixels.write(reinterpret_cast<const char*>(sample.data()), std::streamsize(sample.size()));
    names << source.sample_name(i) << '\n';
  }
  if (!pixels || !names) fail("writing --dump file '{}' failed; check the disk", a.dump);
}

}  // namespace

CLI::App* add_data_bench_command(CLI::App& app, DataBenchArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "data-bench", "time the data loader alone (decode, augmentation, normalization into batches), no model");
  add_data_options(cmd, a.data, true);
  // Its own flags (cli/data_bench_settings.h): the batches, --split, --seed, --host-normalize, --json, --dump.
  add_named_setting_options(cmd, data_bench_settings(), a, {{"json", "FILE"}, {"dump", "FILE"}});
  return cmd;
}

int run_data_bench(const DataBenchArgs& a) {
  std::ofstream json;
  if (!a.json.empty()) {
    json.open(a.json, std::ios::app);
    if (!json) fail("cannot open --json file '{}' for appending; check that its folder exists", a.json);
  }
  const DataSplits data = open_dataset(a.data.data, data_options(a.data));
  const bool train = a.split == "train";
  const SampleSource& source = train ? *data.train : *data.test;
  if (source.count() == 0) fail("the {} split of '{}' holds no samples", a.split, a.data.data);
  const int workers = loader_workers(a.data, data.format);
  if (!a.dump.empty()) dump_samples(source, a);
  const ChannelStats norm = data.train->channel_stats();
  // As training decides: gpu, or auto where the GPU path can run (it then only helps the CPU threads).
  const DecodeDevice decode = parse_decode_device(a.data.decode);
  GpuCropPlan probe;
  const bool gpu = decode == DecodeDevice::Gpu ||
                   (decode == DecodeDevice::Auto && train && !a.host_normalize && gpu_decode_built() &&
                    cuda_device_count() > 0 && source.plan_gpu_crop(0, a.seed, a.epoch, probe));
  if (gpu && (!train || a.host_normalize))
    fail("--decode gpu times training batches of uint8 pixels on the GPU; drop --split val and --host-normalize");
  std::unique_ptr<BatchStream> stream;
  if (gpu) {
    GpuDecodeSettings g;
    g.batch = a.batch, g.drop_last = false, g.seed = a.seed, g.workers = workers;
    g.gpu_lead = decode == DecodeDevice::Gpu ? 2 : 1;
    stream = make_gpu_decode_loader(source, g);
  } else {
    auto cpu = std::make_unique<BatchLoader>(source, a.batch, train, false, norm.mean, norm.std, a.seed, workers);
    cpu->deliver_pixels(!a.host_normalize);
    stream = std::move(cpu);
  }
  BatchStream& loader = *stream;
  const SampleShape shape = source.shape();
  fmt::print("kiln data-bench: {} ({}, {} split: {} samples, {} classes) -> {}x{}x{} samples, batch {}, {} loader "
             "threads, {}\n",
             a.data.data, data.format, a.split, source.count(), source.num_classes(), shape.height, shape.width,
             shape.channels, a.batch, workers,
             gpu ? (decode == DecodeDevice::Gpu ? "decode gpu (nvJPEG)" : "decode auto (nvJPEG helping)") : a.host_normalize ? "normalized floats" : "uint8 pixels");
  using Clock = std::chrono::steady_clock;
  Batch b;
  int epoch = a.epoch;
  loader.start_epoch(epoch);
  // A GPU batch counts once its pixels are on the device; nothing reads them after.
  auto arrived = [&] {
    if (b.device) b.device->wait_ready(), b.device->read_on(nullptr);
  };
  auto next = [&] {
    if (loader.next(b)) return arrived();
    loader.start_epoch(++epoch);  // a small set: go round again, as training would
    if (!loader.next(b)) fail("the loader delivered no batch");
    arrived();
  };
  for (int i = 0; i < a.warmup; ++i) next();
  const auto start = Clock::now();
  int64_t images = 0;
  std::vector<double> batch_ms;
  auto last = start;
  for (int i = 0; i < a.batches; ++i) {
    next();
    images += b.size;
    const auto now = Clock::now();
    batch_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double rate = double(images) / std::max(seconds, 1e-9);
  std::sort(batch_ms.begin(), batch_ms.end());
  const double median_ms = batch_ms[batch_ms.size() / 2];
  fmt::print("{:.0f} images/s ({:.0f} per loader thread), {} images in {:.2f} s, median batch interval {:.1f} ms\n",
             rate, rate / std::max(workers, 1), images, seconds, median_ms);
  if (const std::string how = loader.describe(); !how.empty()) fmt::print("{}\n", how);
  std::vector<std::string> bad = source.skipped();
  if (!bad.empty()) fmt::print("skipped {} unreadable samples (--skip-bad), the first: {}\n", bad.size(), bad.front());
  if (json.is_open())
    json << nlohmann::json{{"framework", "kiln"},      {"data", a.data.data},      {"format", data.format},
                           {"split", a.split},         {"transform", resolved_data_args(a.data, data).transform},
                           {"image_size", shape.height}, {"batch", a.batch},        {"workers", workers},
                           {"dct_scaling", a.data.dct_scaling}, {"host_normalize", a.host_normalize}, {"decode", a.data.decode},
                           {"decoder", loader.describe()}, {"images", images}, {"seconds", seconds},
                           {"images_per_second", rate}, {"median_batch_ms", median_ms}}
                .dump()
         << std::endl;
  return 0;
}

}  // namespace kiln::cli
