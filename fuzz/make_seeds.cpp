// kiln_fuzz_seeds OUT: writes the seed inputs of every fuzz target into OUT/<target>/, made with
// kiln's own writers (write_idx, save_safetensors, encode_jpeg/encode_png, write_pack, export_onnx),
// in each target's input layout (fuzz/<target>_fuzz.cpp). Small images and models keep executions
// fast; fuzz/run.sh runs it when fuzz/corpus/<target>/ is empty, and fuzz/corpus/ keeps the seeds
// it made.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "data/image/image_codec.h"
#include "data/pack/pack_writer.h"
#include "fuzz_support.h"
#include "kiln/checkpoint.h"
#include "kiln/compile.h"
#include "kiln/data.h"
#include "kiln/export.h"

namespace fs = std::filesystem;
using namespace kiln;
using kiln::fuzz::join_parts;

namespace {

using Buffer = std::vector<uint8_t>;

Buffer read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Buffer(std::istreambuf_iterator<char>(in), {});
}

void put(const fs::path& dir, const std::string& name, const Buffer& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

Buffer with_prefix(std::initializer_list<uint8_t> prefix, const Buffer& rest) {
  Buffer out(prefix);
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

Buffer picture(int w, int h, int c, int seed) {
  Buffer p(size_t(w) * h * c);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) p[(size_t(y) * w + x) * c + k] = uint8_t((x * 37 + y * 11 + k * 80 + seed * 13) % 256);
  return p;
}

void idx_seeds(const fs::path& out, const fs::path& tmp) {
  Dataset ds;
  ds.count = 3, ds.height = 2, ds.width = 3, ds.channels = 1, ds.num_classes = 10;
  ds.images = picture(3, 2 * 3, 1, 1);
  ds.labels = {0, 9, 4};
  write_idx(ds, (tmp / "i").string(), (tmp / "l").string());
  const Buffer images = read_all(tmp / "i"), labels = read_all(tmp / "l");
  put(out, "read_idx", with_prefix({2 * 9}, join_parts({images, labels})));
  put(out, "load_dataset", with_prefix({1}, join_parts({images, labels})));
}

void cifar10_seeds(const fs::path& out) {
  Buffer record(3073);
  for (size_t i = 0; i < record.size(); ++i) record[i] = uint8_t(i * 7);
  record[0] = 3;
  Buffer two = record;
  two.insert(two.end(), record.begin(), record.end());
  two[3073] = 9;
  put(out, "read_cifar10", with_prefix({0}, two));
  put(out, "test_batch", with_prefix({1}, record));
  put(out, "five_batches", with_prefix({3}, join_parts({record, record, two, record, record})));
}

void safetensors_seeds(const fs::path& out, const fs::path& tmp) {
  auto tensor = [](std::string name, DType dtype, Shape shape, uint8_t fill) {
    size_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= size_t(d);
    NamedTensor t{std::move(name), dtype, std::move(shape), std::vector<std::byte>(n, std::byte(fill))};
    return t;
  };
  const std::vector<NamedTensor> tensors = {tensor("conv.weight", DType::F32, {2, 1, 1, 2}, 0x3f),
                                            tensor("bn.running_var", DType::F16, {2}, 0x7c),
                                            tensor("bn.num_batches", DType::I32, {}, 1),
                                            tensor("empty", DType::BF16, {0, 3}, 0),
                                            tensor("bytes", DType::U8, {3}, 7),
                                            tensor("fc.bias", DType::F64, {1}, 0xff)};
  save_safetensors((tmp / "a").string(), tensors, {{"format", "kiln"}, {"epochs_done", "1"}});
  put(out, "kiln_checkpoint", read_all(tmp / "a"));
  save_safetensors((tmp / "b").string(), {tensors[0]});
  put(out, "one_tensor", read_all(tmp / "b"));
}

void image_seeds(const fs::path& out) {
  const Buffer rgb = picture(19, 13, 3, 2), gray = picture(16, 9, 1, 3);
  JpegEncodeOptions progressive;
  progressive.progressive = true;
  JpegEncodeOptions cmyk;
  cmyk.cmyk = true;
  JpegEncodeOptions exif;
  exif.exif_orientation = 6;
  exif.sampling = "4:2:2";
  PngEncodeOptions palette;
  palette.palette = true;
  palette.interlaced = true;
  PngEncodeOptions sixteen;
  sixteen.sixteen_bit = true;
  sixteen.alpha = true;
  const Buffer few = [] {
    Buffer p(19 * 13 * 3);
    for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t((i / 3 % 4) * 60);
    return p;
  }();
  // 8 parameter bytes: flags, region (4), min_width, min_height, seed.
  auto params = [](uint8_t flags, const Buffer& file) { return with_prefix({flags, 40, 60, 200, 150, 4, 3, 1}, file); };
  put(out, "jpeg_whole", params(0, encode_jpeg(rgb.data(), 19, 13, 3)));
  put(out, "jpeg_region_gray", params(2 | 1, encode_jpeg(gray.data(), 16, 9, 1)));
  put(out, "jpeg_progressive_region", params(2, encode_jpeg(rgb.data(), 19, 13, 3, progressive)));
  put(out, "jpeg_cmyk", params(0, encode_jpeg(rgb.data(), 19, 13, 3, cmyk)));
  put(out, "jpeg_exif_oriented", params(8, encode_jpeg(rgb.data(), 19, 13, 3, exif)));
  put(out, "jpeg_sample_train", params(16 | 32 | 128, encode_jpeg(rgb.data(), 19, 13, 3)));
  put(out, "jpeg_sample_eval", params(16 | 8, encode_jpeg(rgb.data(), 19, 13, 3, exif)));
  put(out, "png_whole", params(0, encode_png(rgb.data(), 19, 13, 3)));
  put(out, "png_palette_region", params(2, encode_png(few.data(), 19, 13, 3, palette)));
  put(out, "png_16bit_alpha", params(1, encode_png(rgb.data(), 19, 13, 3, sixteen)));
  put(out, "png_sample_plain", params(16 | 64 | 32 | 2, encode_png(gray.data(), 16, 9, 1)));
}

void pack_seeds(const fs::path& out, const fs::path& tmp) {
  const fs::path src = tmp / "folder";
  for (const char* split : {"train", "val"})
    for (int c = 0; c < 2; ++c) {
      const fs::path dir = src / split / (c ? "dog" : "cat");
      fs::create_directories(dir);
      const Buffer p = picture(10 + c, 8, 3, c);
      put(dir, "a.jpg", encode_jpeg(p.data(), 10 + c, 8, 3));
      if (c == 1) put(dir, "b.png", encode_png(p.data(), 10 + c, 8, 3));
    }
  PackOptions o;
  o.max_side = 12;
  o.shard_bytes = 700;  // two train shards
  o.workers = 1;
  o.progress = false;
  const fs::path pack = tmp / "pack";
  write_pack(src.string(), pack.string(), o);
  std::vector<Buffer> files;
  for (const char* name : {"kiln-pack.json", "train.kpi", "train-00000.kpk", "train-00001.kpk", "val.kpi", "val-00000.kpk",
                           "train.kps", "val.kps"})
    files.push_back(fs::exists(pack / name) ? read_all(pack / name) : Buffer());
  const Buffer joined = join_parts(files);
  put(out, "manifest_imagenet", with_prefix({0}, joined));
  put(out, "manifest_plain_gray", with_prefix({2 | 8 | 4}, joined));
  put(out, "direct_two_classes", with_prefix({1 | (1 << 4)}, joined));
}

// folder_scan: a flags byte, then 4-byte operations (kind, parent folder, name, target; the layout
// of fuzz/folder_scan_fuzz.cpp). Names: 0 a, 1 b, 3 sub, 4 x.jpg, 5 y.png, 6 Z.JPEG, 7 .h.jpg,
// 9 loop, 11 q.jpeg. Link targets: 0 "..", 1 "../..", 3 a missing file, 5 + i the i-th node made.
void folder_scan_seeds(const fs::path& out) {
  const Buffer two_classes = {0, 0, 0, 0,  0, 0, 1, 0,  1, 1, 4, 0,  2, 2, 5, 0,
                              1, 1, 11, 0, 0, 1, 3, 0,  2, 3, 5, 0};
  auto seed = [&](uint8_t flags, const Buffer& ops, Buffer more) {
    Buffer b = {flags};
    b.insert(b.end(), ops.begin(), ops.end());
    b.insert(b.end(), more.begin(), more.end());
    return b;
  };
  put(out, "two_classes", seed(2, two_classes, {}));
  put(out, "loop", seed(2, two_classes, {4, 1, 9, 0}));
  put(out, "two_loops", seed(0, two_classes, {4, 1, 9, 0, 4, 2, 3, 1}));
  put(out, "duplicate_link", seed(2, two_classes, {4, 2, 6, 8}));
  put(out, "hard_link", seed(2, two_classes, {5, 2, 6, 0}));
  put(out, "dangling_and_damaged_skip_bad", seed(2 | 4 | 8, two_classes, {4, 1, 6, 3, 3, 2, 7, 0}));
  put(out, "plain_sizes_skip_bad", seed(2 | 4 | 16, two_classes, {}));
  put(out, "splits_auto_transform",
      seed(1 | 2 | 8, {0, 1, 0, 0, 0, 1, 1, 0, 0, 2, 0, 0, 0, 2, 1, 0, 1, 3, 4, 0, 2, 4, 5, 0, 1, 5, 4, 0, 2, 6, 5, 0}, {}));
  put(out, "splits_sharing_a_file",
      seed(1 | 2, {0, 1, 0, 0, 0, 2, 0, 0, 1, 3, 4, 0, 1, 3, 11, 0, 2, 4, 5, 0}, {4, 4, 4, 10}));
}

}  // namespace

// Small models of each kind the importer maps, written by kiln's exporter (BatchNorm kept, and
// folded into the convolutions), after the option byte (fuzz/onnx_import_fuzz.cpp): the file's own
// size and classes, 10x10 with 3 classes, and 12x12.
void onnx_import_seeds(const fs::path& out, const fs::path& tmp) {
  auto write = [&](const std::string& name, Blueprint bp, bool fold_bn, uint8_t flags) {
    CompileOptions o;
    o.batch = 1;
    Executable exe(compile(bp, o), 1);
    OnnxExportOptions options;
    options.fold_bn = fold_bn;
    options.overwrite = true;
    export_onnx(exe, (tmp / "m.onnx").string(), options);
    put(out, name, with_prefix({flags}, read_all(tmp / "m.onnx")));
  };
  Blueprint cnn("cnn");
  cnn.input(8, 8, 3).cbr(4, 3, 1, 1, "conv1").maxpool(2, 2).conv(4, 3, 1, 1, true, "conv2").relu();
  cnn.dropout(0.2).global_avgpool().flatten().fc(5, true, "fc");
  write("cnn_bn", cnn, false, 0);
  write("cnn_folded", cnn, true, 1 | (1 << 1) | 16);
  Blueprint se("se");
  se.input(8, 8, 3).conv(6, 3, 1, 1, false, "stem").bn("stem_bn").silu();
  const Blueprint::Ref x = se.last();
  se.adaptive_avgpool(1, 1).conv(2, 1, 1, 0, true, "fc1").relu().conv(6, 1, 1, 0, true, "fc2").hardsigmoid();
  se.mul(x, se.last()).avgpool(2, 2).hardswish().global_avgpool().flatten().fc(3, true, "head");
  write("squeeze_excitation", se, false, 2 << 1 | 1);
  Blueprint next("convnext");
  next.input(8, 8, 4).conv(8, 2, 2, 0, true, "stem").layer_norm(1e-6, "stem_norm");
  const Blueprint::Ref y = next.last();
  ConvAttrs depthwise;
  depthwise.out_channels = 8, depthwise.kernel_h = depthwise.kernel_w = 3, depthwise.groups = 8;
  depthwise.pad_top = depthwise.pad_left = depthwise.pad_bottom = depthwise.pad_right = 1, depthwise.bias = true;
  next.conv(depthwise, "block.dw").layer_norm(1e-6, "block.norm").fc(16, true, "block.pw1").gelu();
  next.fc(8, true, "block.pw2").layer_scale(0.5f, "block").add(y, next.last()).group_norm(2, 1e-5, "gn");
  next.global_avgpool().flatten().fc(4, true, "classifier");
  write("convnext_block", next, false, 0);
  Blueprint shuffle("shuffle");
  shuffle.input(8, 8, 3).cbr(8, 3, 1, 1, "stem");
  const Blueprint::Ref z = shuffle.last();
  shuffle.channel_slice(0, 4, "left");
  const Blueprint::Ref left = shuffle.last();
  shuffle.from(z).channel_slice(4, 4, "right").cbr(4, 1, 1, 0, "branch");
  shuffle.concat({left, shuffle.last()}).channel_shuffle(2).global_avgpool().flatten().fc(2, true, "fc");
  write("channel_shuffle", shuffle, false, 0);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kiln_fuzz_seeds OUT\n");
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path tmp = fs::temp_directory_path() / fmt::format("kiln-fuzz-seeds-{}", ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    idx_seeds(out / "idx", tmp);
    cifar10_seeds(out / "cifar10");
    safetensors_seeds(out / "safetensors", tmp);
    image_seeds(out / "image_decode");
    pack_seeds(out / "pack", tmp);
    folder_scan_seeds(out / "folder_scan");
    onnx_import_seeds(out / "onnx_import", tmp);
    // cli_options: argv words separated by NUL bytes.
    auto words = [](std::initializer_list<std::string> list) {
      Buffer b;
      for (const std::string& w : list) {
        if (!b.empty()) b.push_back(0);
        b.insert(b.end(), w.begin(), w.end());
      }
      return b;
    };
    const fs::path cli = out / "cli_options";
    put(cli, "train", words({"train", "--data", "d", "--format", "packed", "--transform", "imagenet", "--crop-scale",
                             "0.08,1", "--crop-ratio", "0.75,1.333", "--image-size", "32", "--hflip", "--model",
                             "resnet18_cifar", "--device", "cuda:1", "--precision", "bf16", "--schedule", "step",
                             "--optimizer", "adamw", "--loss-scale", "dynamic", "--decode", "gpu"}));
    put(cli, "eval", words({"eval", "-c", "x.safetensors", "--split", "train", "--batch", "7", "--eval-resize", "40",
                            "--channels", "1", "--normalize", "dataset", "--transform", "plain"}));
    put(cli, "data_bench", words({"data-bench", "--data", "p", "--batches", "3", "--workers", "0", "--crop-pad", "4",
                                  "--no-hflip", "--dct-scaling", "0", "--exif-orientation", "--skip-bad"}));
    put(cli, "pack", words({"pack", "src", "out", "--max-side", "64", "--quality", "80", "--shard-mb", "1"}));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_fuzz_seeds: %s\n", e.what());
    fs::remove_all(tmp);
    return 1;
  }
  fs::remove_all(tmp);
  return 0;
}
