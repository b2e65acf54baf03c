# Writes the one list of op kinds, KILN_OP_KINDS (<build>/generated/include/kiln/op_kinds.h, installed
# with the headers; kiln/program.h expands it into kiln::OpKind), from the op families' own lists:
# src/ops/<family>/<family>_op_kinds.def, one KILN_OP_KIND(NAME) line per kind, families in name
# order. Adding an op kind edits its family's list only; cmake re-runs when a list changes.
#   kiln_op_kinds(<output file>)
include(${CMAKE_CURRENT_LIST_DIR}/family_lists.cmake)
function(kiln_op_kinds output)
  kiln_family_list_files(op_kinds.def lists)
  set(entries "")
  set(seen "")
  foreach(list_file ${lists})
    get_filename_component(family_dir ${list_file} DIRECTORY)
    get_filename_component(family ${family_dir} NAME)
    file(STRINGS ${list_file} lines REGEX "^KILN_OP_KIND")
    string(APPEND entries "  /* ${family} */")
    foreach(line ${lines})
      if(NOT line MATCHES "^KILN_OP_KIND\\(([A-Z][A-Z0-9_]*)\\)$")
        message(FATAL_ERROR "${list_file}: '${line}' is not KILN_OP_KIND(NAME) (upper case, digits, _)")
      endif()
      if(CMAKE_MATCH_1 IN_LIST seen)
        message(FATAL_ERROR "${list_file}: op kind ${CMAKE_MATCH_1} is listed twice")
      endif()
      list(APPEND seen ${CMAKE_MATCH_1})
      string(APPEND entries " X(${CMAKE_MATCH_1})")
    endforeach()
    string(APPEND entries " \\\n")
  endforeach()
  file(CONFIGURE OUTPUT ${output} CONTENT "#pragma once
// Written by cmake/op_kinds.cmake from src/ops/*/<family>_op_kinds.def: every op kind, family by
// family (kiln/program.h makes kiln::OpKind and op_kind_name of it).
#define KILN_OP_KINDS(X) \\
${entries}
")
endfunction()
