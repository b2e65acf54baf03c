# Collects every layer kind's export (`extern const LayerExport k<Name>Export{<kind>, ...}`, see
# src/export/layer_export.h) of the export files, src/ops/<family>/*_export.cpp beside the kind's
# lowering and ops and src/export/*_export.cpp for a kind without a family (Flatten), into one
# generated list (all_layer_exports()) compiled into kiln_export, so adding a layer kind's export
# edits no list by hand. tests/architecture/layer_exports_test.cpp fails for a layer kind without
# exactly one.
#   kiln_layer_exports(<output file> <variable receiving the family folders' export sources>)
include(${CMAKE_CURRENT_LIST_DIR}/definition_list.cmake)
function(kiln_layer_exports output family_sources)
  kiln_definition_list(TYPE LayerExport SUFFIX Export HEADER export/layer_export.h FUNCTION all_layer_exports
                       OUTPUT ${output} GLOBS src/ops/*/*_export.cpp src/export/*_export.cpp FILES files)
  list(FILTER files INCLUDE REGEX "/src/ops/")  # src/export's own files are kiln_export's sources already
  set(${family_sources} ${files} PARENT_SCOPE)
endfunction()
