# Collects a table that every op family may define in its own folder, so adding a family edits no
# list: src/ops/<family>/<family>_<file suffix>.cpp defines `extern const <type> <family>_<symbol suffix>`
# (namespace kiln::ops), and this writes the function that lists them. The reference to each table
# also keeps its object file in the link (static libraries drop unreferenced objects).
#   kiln_family_tables(<file suffix> <type> <symbol suffix> <header> <function> <output file> <out var: sources>)
function(kiln_family_tables file_suffix type symbol_suffix header function output sources_var)
  file(GLOB family_dirs LIST_DIRECTORIES true CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ops/*)
  set(declarations "")
  set(entries "")
  set(sources "")
  foreach(dir ${family_dirs})
    get_filename_component(family ${dir} NAME)
    set(file ${dir}/${family}_${file_suffix}.cpp)
    if(EXISTS ${file})
      string(APPEND declarations "extern const ${type} ${family}_${symbol_suffix};\n")
      string(APPEND entries "      &ops::${family}_${symbol_suffix},\n")
      list(APPEND sources ${file})
    endif()
  endforeach()
  set(text "// Written by cmake/op_tables.cmake: the ${type}s of src/ops/*/*_${file_suffix}.cpp.
#include \"${header}\"

namespace kiln {
namespace ops {
${declarations}}  // namespace ops

const std::vector<const ${type}*>& ${function}() {
  static const std::vector<const ${type}*> tables = {
${entries}  };
  return tables;
}

}  // namespace kiln
")
  file(CONFIGURE OUTPUT ${output} CONTENT "${text}")
  set(${sources_var} ${sources} PARENT_SCOPE)
endfunction()

# The op tables of one backend: src/ops/<family>/<family>_ops_<backend>.cpp defines
# `extern const OpTable <family>_<backend>_ops`.
#   kiln_op_tables(<backend> <function name> <output file> <out var: the family sources>)
function(kiln_op_tables backend function output sources_var)
  kiln_family_tables(ops_${backend} OpTable ${backend}_ops runtime/op_call.h ${function} ${output} sources)
  set(${sources_var} ${sources} PARENT_SCOPE)
endfunction()
