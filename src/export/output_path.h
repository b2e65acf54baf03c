#pragma once
// Where an exporter may write: checked before any work, so a refused export costs nothing and
// changes nothing.
#include <string>

namespace kiln::export_layout {

// Throws kiln::Error naming `path` and the fix when it is empty or a folder, when its folder does
// not exist or cannot be written, or when a file is there already and `overwrite` is false (that
// file is left as it was). `what` names the file in messages ("ONNX model"), `overwrite_flag` the
// switch that allows replacing it ("--overwrite (OnnxExportOptions::overwrite)").
void check_output_path(const std::string& path, bool overwrite, const char* what, const char* overwrite_flag);

}  // namespace kiln::export_layout
