# Collects every layer kind's export (`extern const LayerExport k<Name>Export{<kind>, ...}`, see
# src/export/layer_export.h) of the export files, src/ops/<family>/*_export.cpp beside the kind's
# lowering and ops and src/export/*_export.cpp for a kind without a family (Flatten), into one
# generated list compiled into kiln_export, so adding a layer kind's export edits no list by hand;
# cmake re-runs when an export file changes, so a definition added to an existing file is found too.
# tests/architecture/layer_exports_test.cpp fails for a layer kind without exactly one.
#   kiln_layer_exports(<output file> <variable receiving the family folders' export sources>)
function(kiln_layer_exports output family_sources)
  file(GLOB family_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ops/*/*_export.cpp)
  file(GLOB export_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/export/*_export.cpp)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${family_files} ${export_files})
  set(names "")
  foreach(file ${family_files} ${export_files})
    file(STRINGS ${file} lines REGEX "^extern const LayerExport k[A-Za-z0-9]+Export[{]")
    foreach(line ${lines})
      string(REGEX REPLACE "^extern const LayerExport (k[A-Za-z0-9]+Export)[{].*" "\\1" name "${line}")
      list(APPEND names ${name})
    endforeach()
  endforeach()
  list(SORT names)
  list(JOIN names ", " declarations)
  list(TRANSFORM names PREPEND "&")
  list(JOIN names ", " entries)
  file(CONFIGURE OUTPUT ${output} CONTENT "// Written by cmake/layer_exports.cmake: the layer exports of src/ops/*/*_export.cpp and src/export/*_export.cpp.
#include \"export/layer_export.h\"

namespace kiln {

extern const LayerExport ${declarations};

const std::vector<const LayerExport*>& all_layer_exports() {
  static const std::vector<const LayerExport*> exports = {${entries}};
  return exports;
}

}  // namespace kiln
")
  set(${family_sources} ${family_files} PARENT_SCOPE)
endfunction()
