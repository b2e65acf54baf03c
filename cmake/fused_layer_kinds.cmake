# Writes KILN_FUSED_LAYER_KINDS (<build>/generated/src/ir/fused_layer_kind_list.h, internal: not
# installed) from the op families' lists of the layer kinds their fusions add,
# src/ops/<family>/<family>_layer_kinds.def, one KILN_FUSED_LAYER_KIND(Enumerator, name) line per
# kind, families in name order. src/ir/fused_layer_kinds.h makes kiln::fused_layer::<Enumerator>
# of it, so a fused layer kind is declared in its family folder and in no public header.
#   kiln_fused_layer_kinds(<output file>)
include(${CMAKE_CURRENT_LIST_DIR}/family_lists.cmake)
function(kiln_fused_layer_kinds output)
  kiln_family_list_files(layer_kinds.def lists)
  set(entries "")
  set(seen "")
  foreach(list_file ${lists})
    get_filename_component(family_dir ${list_file} DIRECTORY)
    get_filename_component(family ${family_dir} NAME)
    file(STRINGS ${list_file} lines REGEX "^KILN_FUSED_LAYER_KIND")
    foreach(line ${lines})
      if(NOT line MATCHES "^KILN_FUSED_LAYER_KIND\\(([A-Z][A-Za-z0-9]*), ([a-z][a-z0-9_]*)\\)$")
        message(FATAL_ERROR "${list_file}: '${line}' is not KILN_FUSED_LAYER_KIND(Enumerator, name) "
                            "(an upper-case initial; the name lower case, digits, _)")
      endif()
      if(CMAKE_MATCH_1 IN_LIST seen)
        message(FATAL_ERROR "${list_file}: fused layer kind ${CMAKE_MATCH_1} is listed twice")
      endif()
      list(APPEND seen ${CMAKE_MATCH_1})
      string(APPEND entries "  X(${CMAKE_MATCH_1}, \"${CMAKE_MATCH_2}\") /* ${family} */ \\\n")
    endforeach()
  endforeach()
  file(CONFIGURE OUTPUT ${output} CONTENT "#pragma once
// Written by cmake/fused_layer_kinds.cmake from src/ops/*/<family>_layer_kinds.def: every layer
// kind the compiler's fusions add (src/ir/fused_layer_kinds.h makes kiln::fused_layer of it).
#define KILN_FUSED_LAYER_KINDS(X) \\
${entries}
")
endfunction()
