# Writes KILN_FUSED_LAYER_KINDS (<build>/generated/src/ir/fused_layer_kind_list.h, internal: not
# installed) from the op families' lists of the layer kinds their fusions add,
# src/ops/<family>/<family>_layer_kinds.def, one KILN_FUSED_LAYER_KIND(Enumerator, name) line per
# kind, families in name order. src/ir/fused_layer_kinds.h makes kiln::fused_layer::<Enumerator>
# of it, so a fused layer kind is declared in its family folder and in no public header.
#   kiln_fused_layer_kinds(<output file>)
function(kiln_fused_layer_kinds output)
  file(GLOB lists CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ops/*/*_layer_kinds.def)
  list(SORT lists)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${lists})
  set(entries "")
  set(seen "")
  foreach(list_file ${lists})
    get_filename_component(family_dir ${list_file} DIRECTORY)
    get_filename_component(family ${family_dir} NAME)
    if(NOT list_file STREQUAL "${family_dir}/${family}_layer_kinds.def")
      message(FATAL_ERROR "${list_file}: a family's fused layer kinds are named after its folder: ${family}_layer_kinds.def")
    endif()
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
