# Collects the op tables of every op family for one backend: src/ops/<family>/<family>_ops_<backend>.cpp
# defines `extern const OpTable <family>_<backend>_ops` (namespace kiln::ops), and this writes the
# function that lists them, so adding a family edits no list. The reference to each table also
# keeps its object file in the link (static libraries drop unreferenced objects).
#   kiln_op_tables(<backend> <function name> <output file> <out var: the family sources>)
function(kiln_op_tables backend function output sources_var)
  file(GLOB family_dirs LIST_DIRECTORIES true CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ops/*)
  set(declarations "")
  set(entries "")
  set(sources "")
  foreach(dir ${family_dirs})
    get_filename_component(family ${dir} NAME)
    set(file ${dir}/${family}_ops_${backend}.cpp)
    if(EXISTS ${file})
      string(APPEND declarations "extern const OpTable ${family}_${backend}_ops;\n")
      string(APPEND entries "      &ops::${family}_${backend}_ops,\n")
      list(APPEND sources ${file})
    endif()
  endforeach()
  set(text "// Written by cmake/op_tables.cmake: the ${backend} op tables of src/ops/*/*_ops_${backend}.cpp.
#include \"runtime/op_call.h\"

namespace kiln {
namespace ops {
${declarations}}  // namespace ops

const std::vector<const OpTable*>& ${function}() {
  static const std::vector<const OpTable*> tables = {
${entries}  };
  return tables;
}

}  // namespace kiln
")
  file(CONFIGURE OUTPUT ${output} CONTENT "${text}")
  set(${sources_var} ${sources} PARENT_SCOPE)
endfunction()
