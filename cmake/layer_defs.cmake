# Collects every layer definition (`extern const LayerDef k<Name>Layer{<kind>, ...}`) of the layer
# lowering files, src/ops/<family>/*_layer.cpp beside the ops they emit and src/compile/*_layer.cpp
# for the layers that emit none of their own, into one generated list, so adding a layer edits no
# list by hand; cmake re-runs when a layer file changes, so a definition added to an existing file
# is found too.
#   kiln_layer_defs(<output file>)
function(kiln_layer_defs output)
  file(GLOB layer_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ops/*/*_layer.cpp
       ${CMAKE_SOURCE_DIR}/src/compile/*_layer.cpp)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${layer_files})
  set(names "")
  foreach(file ${layer_files})
    file(STRINGS ${file} lines REGEX "^extern const LayerDef k[A-Za-z0-9]+Layer[{]")
    foreach(line ${lines})
      string(REGEX REPLACE "^extern const LayerDef (k[A-Za-z0-9]+Layer)[{].*" "\\1" name "${line}")
      list(APPEND names ${name})
    endforeach()
  endforeach()
  list(SORT names)
  list(JOIN names ", " declarations)
  list(TRANSFORM names PREPEND "&")
  list(JOIN names ", " entries)
  file(CONFIGURE OUTPUT ${output} CONTENT "// Written by cmake/layer_defs.cmake: the layer definitions of src/ops/*/*_layer.cpp and src/compile/*_layer.cpp.
#include \"compile/layer_def.h\"

namespace kiln {

extern const LayerDef ${declarations};

const std::vector<const LayerDef*>& all_layer_defs() {
  static const std::vector<const LayerDef*> defs = {${entries}};
  return defs;
}

}  // namespace kiln
")
endfunction()
