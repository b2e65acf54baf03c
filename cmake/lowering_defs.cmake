# Collects the lowering families besides the layers (cmake/layer_defs.cmake has those), each a
# file beside the kernels of its ops, into generated lists, so that adding one edits no list by hand
# and compile() names none: each optimizer (src/ops/<family>/<name>_optimizer.cpp,
# `extern const OptimizerFamily k<Name>Optimizer{`), the loss (*_loss.cpp, `extern const LossDef
# k<Name>Loss{`) and loss scaling (*_loss_scale.cpp, `extern const LossScaleDef k<Name>LossScale{`).
# The ops the compiler places itself are made in *_lowering.cpp files (compile/compiler_ops.h),
# which have no list. cmake re-runs when such a file changes, so a definition added to an existing
# file is found too.
#   kiln_definition_list(<file suffix> <type> <symbol suffix> <header> <function> <output> <out var: the files>)
# writes <output>, defining `const std::vector<const <type>*>& <function>()` over every
# `extern const <type> k<Name><symbol suffix>{` of src/ops/*/*_<file suffix>.cpp, in the order of
# the symbols' names.
function(kiln_definition_list file_suffix type symbol_suffix header function output files_var)
  file(GLOB files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ops/*/*_${file_suffix}.cpp)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${files})
  set(names "")
  foreach(file ${files})
    file(STRINGS ${file} lines REGEX "^extern const ${type} k[A-Za-z0-9]+${symbol_suffix}[{]")
    foreach(line ${lines})
      string(REGEX REPLACE "^extern const ${type} (k[A-Za-z0-9]+${symbol_suffix})[{].*" "\\1" name "${line}")
      list(APPEND names ${name})
    endforeach()
  endforeach()
  list(SORT names)
  list(JOIN names ", " declarations)
  list(TRANSFORM names PREPEND "&")
  list(JOIN names ", " entries)
  file(CONFIGURE OUTPUT ${output} CONTENT "// Written by cmake/lowering_defs.cmake: the ${type}s of src/ops/*/*_${file_suffix}.cpp.
#include \"${header}\"

namespace kiln {

extern const ${type} ${declarations};

const std::vector<const ${type}*>& ${function}() {
  static const std::vector<const ${type}*> defs = {${entries}};
  return defs;
}

}  // namespace kiln
")
  set(${files_var} ${files} PARENT_SCOPE)
endfunction()

# The lowering families' files and their generated lists, for the engine's sources.
#   kiln_lowering_defs(<out var: sources>)
function(kiln_lowering_defs sources_var)
  set(generated ${CMAKE_BINARY_DIR}/generated)
  kiln_definition_list(optimizer OptimizerFamily Optimizer compile/optimizer_family.h all_optimizer_families
                       ${generated}/optimizer_families.cpp optimizer_files)
  kiln_definition_list(loss LossDef Loss compile/loss_def.h all_loss_defs ${generated}/loss_defs.cpp loss_files)
  kiln_definition_list(loss_scale LossScaleDef LossScale compile/loss_scale_def.h all_loss_scale_defs
                       ${generated}/loss_scale_defs.cpp loss_scale_files)
  file(GLOB lowering_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ops/*/*_lowering.cpp)
  set(${sources_var} ${optimizer_files} ${loss_files} ${loss_scale_files} ${lowering_files}
      ${generated}/optimizer_families.cpp ${generated}/loss_defs.cpp ${generated}/loss_scale_defs.cpp PARENT_SCOPE)
endfunction()
