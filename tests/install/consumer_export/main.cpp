// Built against kiln::export (tests/install/install_test.cmake): compiles a tiny CNN and writes it,
// in the working folder, as an ONNX model (tiny.onnx) and as PyTorch's state_dict in safetensors
// (tiny.safetensors); both must exist and be non-empty. `app_export onnx` expects the ONNX model to
// be written; `app_export no-onnx` (kiln built without libonnx-dev) expects export_onnx to refuse
// with kiln::Error saying what to install, and the state_dict to be written all the same.
// Exit status 0 when all of that holds.
#include <cstdio>
#include <filesystem>
#include <string>

#include "kiln/export.h"
#include "kiln/kiln.h"

namespace {

// The file's size, or -1 (with the reason on stderr) where it is missing or empty.
long long written(const std::string& path) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec || bytes == 0) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), ec ? ec.message().c_str() : "empty");
    return -1;
  }
  return static_cast<long long>(bytes);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "onnx" && mode != "no-onnx") {
    std::fprintf(stderr, "usage: %s onnx|no-onnx (whether kiln was built with the ONNX library)\n", argv[0]);
    return 2;
  }
  const bool expect_onnx = mode == "onnx";
  if (kiln::onnx_export_available() != expect_onnx) {
    std::fprintf(stderr, "onnx_export_available() is %d; the install test expects %d\n",
                 int(kiln::onnx_export_available()), int(expect_onnx));
    return 1;
  }

  kiln::Blueprint m("tiny");
  m.input(8, 8, 1).conv(4, 3, 1, 1).bn().relu().maxpool(2, 2).flatten().fc(3);
  kiln::CompileOptions c;  // the CPU
  c.batch = 2;
  const std::string onnx = "tiny.onnx", torch = "tiny.safetensors";
  try {
    kiln::Executable exe(kiln::compile(m, c), 1);
    kiln::OnnxExportOptions o;
    o.overwrite = true;
    o.info.model = m.name();
    try {
      const kiln::OnnxExportSummary s = kiln::export_onnx(exe, onnx, o);
      if (!expect_onnx) {
        std::fprintf(stderr, "export_onnx wrote %s in a kiln built without ONNX\n", onnx.c_str());
        return 1;
      }
      if (written(onnx) < 0) return 1;
      std::printf("kiln::export: wrote %s: opset %d, %lld nodes, %lld bytes\n", onnx.c_str(), s.opset,
                  static_cast<long long>(s.nodes), written(onnx));
    } catch (const kiln::Error& e) {
      if (expect_onnx || std::string(e.what()).find("libonnx-dev") == std::string::npos) {
        std::fprintf(stderr, "export_onnx failed: %s\n", e.what());
        return 1;
      }
      std::printf("kiln::export: without ONNX, export_onnx refuses: %s\n", e.what());
    }

    kiln::TorchExportOptions t;
    t.overwrite = true;
    t.info.model = m.name();
    const kiln::TorchExportSummary s = kiln::export_torch_weights(exe, torch, t);
    if (written(torch) < 0) return 1;
    std::printf("kiln::export: wrote %s: %d tensors, %lld bytes\n", torch.c_str(), s.tensors, written(torch));
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "export failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
