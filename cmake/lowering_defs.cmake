# Collects the lowering families besides the layers (cmake/layer_defs.cmake has those), each a
# file beside the kernels of its ops, into generated lists, so that adding one edits no list by hand
# and compile() names none: each optimizer (src/ops/<family>/<name>_optimizer.cpp,
# `extern const OptimizerFamily k<Name>Optimizer{`), the loss (*_loss.cpp, `extern const LossDef
# k<Name>Loss{`) and loss scaling (*_loss_scale.cpp, `extern const LossScaleDef k<Name>LossScale{`).
# The ops the compiler places itself are made in *_lowering.cpp files (compile/compiler_ops.h),
# which have no list.
include(${CMAKE_CURRENT_LIST_DIR}/definition_list.cmake)

# The lowering families' files and their generated lists, for the engine's sources.
#   kiln_lowering_defs(<out var: sources>)
function(kiln_lowering_defs sources_var)
  set(generated ${CMAKE_BINARY_DIR}/generated)
  kiln_definition_list(TYPE OptimizerFamily SUFFIX Optimizer HEADER compile/optimizer_family.h
                       FUNCTION all_optimizer_families OUTPUT ${generated}/optimizer_families.cpp
                       GLOBS src/ops/*/*_optimizer.cpp FILES optimizer_files)
  kiln_definition_list(TYPE LossDef SUFFIX Loss HEADER compile/loss_def.h FUNCTION all_loss_defs
                       OUTPUT ${generated}/loss_defs.cpp GLOBS src/ops/*/*_loss.cpp FILES loss_files)
  kiln_definition_list(TYPE LossScaleDef SUFFIX LossScale HEADER compile/loss_scale_def.h
                       FUNCTION all_loss_scale_defs OUTPUT ${generated}/loss_scale_defs.cpp
                       GLOBS src/ops/*/*_loss_scale.cpp FILES loss_scale_files)
  file(GLOB lowering_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ops/*/*_lowering.cpp)
  set(${sources_var} ${optimizer_files} ${loss_files} ${loss_scale_files} ${lowering_files}
      ${generated}/optimizer_families.cpp ${generated}/loss_defs.cpp ${generated}/loss_scale_defs.cpp PARENT_SCOPE)
endfunction()
