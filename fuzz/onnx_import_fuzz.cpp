// Fuzz target "onnx_import": the ONNX importer (kiln::import_onnx, through import_onnx_bytes), which
// `kiln train|plan|bench|eval|predict --model net.onnx` runs on a file from anywhere.
// Feeds: one option byte (bit 0: fix the input at 8x8 + (bits 1-3) over the file's size; bit 4:
// ask for 3 classes, a new head), then the file's bytes.
// Asserts: success or kiln::Error; on success the model has layers and an input, every weight has a
// unique name and a kiln tensor, its bytes match its shape and dtype, the SHA-256 is 64 lowercase
// hex digits, and a model small enough (parameters, pixels, arena, multiply-adds) compiles on the
// CPU at batch 1, loads its weights (or refuses either with a kiln::Error) and runs inference to
// logits.
#include <set>

#include "fuzz_support.h"
#include "import/onnx_import_bytes.h"
#include "kiln/compile.h"
#include "kiln/onnx_import.h"

namespace kiln::fuzz {
namespace {

// Compiling and running costs time and memory with the model's size: only small models run (a
// fuzzed file can name a 4096-channel convolution on a 4096x4096 input).
// Concatenations can multiply channels without a parameter, so the planned arena is bounded too.
// The work of one inference is bounded as well: with oneDNN off and ASan on, kiln's loops ran about
// 60 ms an input once the corpus held whole models (64x64 maps through 65k parameters), 80 inputs a
// second, where the rest of the target runs thousands.
constexpr int64_t kLargestRunParameters = 1 << 16;
constexpr int64_t kLargestRunPixels = 64 * 64;
constexpr size_t kLargestRunArena = size_t(64) << 20;
constexpr int64_t kLargestRunMultiplyAdds = 1 << 20;

int64_t parameter_count(const ImportedModel& m) {
  int64_t n = 0;
  for (const NamedTensor& t : m.weights) n += numel(t.shape);
  return n;
}

}  // namespace

void onnx_import_input(Bytes input) {
  ByteReader reader(input);
  const uint8_t flags = reader.u8();
  OnnxImportOptions options;
  if (flags & 1) options.height = options.width = 8 + ((flags >> 1) & 7);
  if (flags & 16) options.num_classes = 3;
  accept_kiln_errors([&] {
    const ImportedModel m = onnx_import::import_onnx_bytes(reader.rest(), "fuzz.onnx", options);
    KILN_FUZZ_CHECK(!m.blueprint.nodes().empty());
    KILN_FUZZ_CHECK(m.blueprint.input_hwc().has_value());
    KILN_FUZZ_CHECK(m.sha256.size() == 64);
    for (char c : m.sha256) KILN_FUZZ_CHECK((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    std::set<std::string> names;
    for (const NamedTensor& t : m.weights) {
      KILN_FUZZ_CHECK(names.insert(t.name).second);
      KILN_FUZZ_CHECK(m.kiln_tensor.count(t.name) == 1);
      int64_t count = 1;
      for (int64_t d : t.shape) {
        KILN_FUZZ_CHECK(d >= 0);
        count *= d;
      }
      KILN_FUZZ_CHECK(size_t(count) * dtype_size(t.dtype) == t.data.size());
    }
    const Shape& hwc = *m.blueprint.input_hwc();
    if (parameter_count(m) > kLargestRunParameters || hwc[0] * hwc[1] > kLargestRunPixels) return;
    CompileOptions o;
    o.batch = 1;
    Program program = compile(m.blueprint, o);
    if (program.memory.arena_bytes > kLargestRunArena) return;
    if (count_model(program).multiply_adds > kLargestRunMultiplyAdds) return;
    Executable exe(std::move(program), 1);
    load_imported_weights(exe, m);
    const Program& p = exe.program();
    std::vector<float> x(size_t(numel(p.tensors[size_t(p.input)].shape)), 0.5f);
    exe.write(p.input, x.data(), x.size() * sizeof(float));
    exe.run_inference({});
    KILN_FUZZ_CHECK(!exe.read<float>(p.inference_logits).empty());
  });
}

}  // namespace kiln::fuzz

KILN_FUZZ_TARGET(onnx_import_input)
