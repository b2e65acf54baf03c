# Collects every layer definition (`extern const LayerDef k<Name>Layer{<kind>, ...}`) of the layer
# lowering files, src/ops/<family>/*_layer.cpp beside the ops they emit and src/compile/*_layer.cpp
# for the layers that emit none of their own, into one generated list (all_layer_defs(),
# compile/layer_def.h), so adding a layer edits no list by hand.
#   kiln_layer_defs(<output file>)
include(${CMAKE_CURRENT_LIST_DIR}/definition_list.cmake)
function(kiln_layer_defs output)
  kiln_definition_list(TYPE LayerDef SUFFIX Layer HEADER compile/layer_def.h FUNCTION all_layer_defs
                       OUTPUT ${output} GLOBS src/ops/*/*_layer.cpp src/compile/*_layer.cpp)
endfunction()
