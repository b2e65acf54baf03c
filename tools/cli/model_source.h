#pragma once
// What --model names: a model of the zoo, or an ONNX file (a path ending in .onnx) that kiln
// imports (kiln/onnx_import.h). Every command that builds a model from --model, or from the model a
// checkpoint records, goes through here, so a file is read, checked and described the same way
// everywhere. A run from a file records the file's path and SHA-256 in its checkpoint's recipe
// (model_recipe), so that --resume refuses another file and eval, predict and export rebuild the
// model from the same file, refusing it once its contents changed.
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/onnx_import.h"

namespace kiln::cli {

struct ModelSource {
  std::string name;  // what --model said (or the checkpoint recorded): the zoo name or the file's path
  Blueprint blueprint;
  std::optional<ImportedModel> imported;  // an ONNX file's import: its weights, notes and hash
  // The file's last linear layer was made anew for another count of classes
  // (OnnxImportOptions::num_classes): its weights are not the file's.
  bool new_head = false;
  bool is_file() const { return imported.has_value(); }
};

// Whether `model` names an ONNX file rather than a zoo model: it ends in ".onnx" (any case).
bool names_onnx_file(const std::string& model);

// The model `model` names with `classes` outputs (-1: the zoo model's default, or the file's). For
// a file, `height` and `width` (0: the file's) are the images it is compiled for. A zoo name kiln
// does not know is zoo::by_name's error; a file that is missing, unreadable or damaged, or whose
// output cannot give `classes` classes, a kiln::Error naming it and the fix.
ModelSource resolve_model(const std::string& model, int classes = -1, int height = 0, int width = 0);

// The import's notes (BatchNorm folded by an eval-mode export, a new head, ...), one line each,
// "kiln: <file>: <note>"; nothing for a zoo model. Printed beside each command's header, on `out`
// (stderr where stdout is a --json object).
void print_model_notes(const ModelSource& source, std::FILE* out = stdout);

// The checkpoint recipe's entries for a model file (TrainOptions::data_recipe): its absolute path
// ("model_file") and SHA-256 ("model_sha256"); none for a zoo model. The keys are the checkpoint's
// format.
std::vector<std::pair<std::string, std::string>> model_recipe(const ModelSource& source);

// Before --resume continues `checkpoint` (if it exists): a kiln::Error when it was trained from a
// model file other than this run's (another SHA-256, or a zoo model on one side), naming both and
// what to do.
void check_model_resumes(const std::string& checkpoint, const ModelSource& source);

// The model a checkpoint of kiln train records (its metadata "recipe.model", and for a file
// "recipe.model_file" and "recipe.model_sha256") with `classes` outputs, for eval, predict and
// export: a file is imported again and refused, naming it, the checkpoint and the fix, when it is
// gone or its SHA-256 is no longer the one recorded.
ModelSource recorded_model(const std::string& checkpoint, const std::map<std::string, std::string>& metadata,
                           int classes, int height, int width);

}  // namespace kiln::cli
