# The one mechanism behind the build's generated lists of definitions (cmake/layer_defs.cmake,
# cmake/layer_exports.cmake, cmake/lowering_defs.cmake): a kind of thing is defined in files named
# by a pattern, each as `extern const <Type> k<Name><Suffix>{`, and the build writes the function
# that lists them, so adding one edits no list by hand. cmake re-runs when such a file changes,
# so a definition added to an existing file is found too.
#   kiln_definition_list(TYPE <Type> SUFFIX <symbol suffix> HEADER <header declaring the function>
#                        FUNCTION <name> OUTPUT <generated .cpp> GLOBS <patterns under the source dir>...
#                        [FILES <out var: the files the patterns matched>])
# writes OUTPUT, defining `const std::vector<const <Type>*>& <FUNCTION>()` over every definition
# of the matched files, in the order of the symbols' names.
function(kiln_definition_list)
  cmake_parse_arguments(arg "" "TYPE;SUFFIX;HEADER;FUNCTION;OUTPUT;FILES" "GLOBS" ${ARGN})
  set(patterns ${arg_GLOBS})
  list(TRANSFORM patterns PREPEND ${CMAKE_SOURCE_DIR}/)
  file(GLOB files CONFIGURE_DEPENDS ${patterns})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${files})
  set(definition "^extern const ${arg_TYPE} (k[A-Za-z0-9]+${arg_SUFFIX})[{]")
  set(names "")
  foreach(file ${files})
    file(STRINGS ${file} lines REGEX "${definition}")
    foreach(line ${lines})
      string(REGEX REPLACE "${definition}.*" "\\1" name "${line}")
      list(APPEND names ${name})
    endforeach()
  endforeach()
  list(SORT names)
  list(JOIN names ", " declarations)
  list(TRANSFORM names PREPEND "&")
  list(JOIN names ", " entries)
  list(JOIN arg_GLOBS " and " sources)
  file(CONFIGURE OUTPUT ${arg_OUTPUT} CONTENT "// Written by cmake/definition_list.cmake: the ${arg_TYPE}s of ${sources}.
#include \"${arg_HEADER}\"

namespace kiln {

extern const ${arg_TYPE} ${declarations};

const std::vector<const ${arg_TYPE}*>& ${arg_FUNCTION}() {
  static const std::vector<const ${arg_TYPE}*> defs = {${entries}};
  return defs;
}

}  // namespace kiln
")
  if(arg_FILES)
    set(${arg_FILES} ${files} PARENT_SCOPE)
  endif()
endfunction()
