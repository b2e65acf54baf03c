# Writes the public enum kiln::Activation (<build>/generated/include/kiln/activation_kinds.h, installed
# with the headers) from the activation family's list, src/ops/activation/activation_list.def, so
# adding an activation edits its family folder only: the list's line and the function's struct.
# cmake re-runs when the list changes.
#   kiln_activation_kinds(<output file>)
function(kiln_activation_kinds output)
  set(list_file ${CMAKE_SOURCE_DIR}/src/ops/activation/activation_list.def)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${list_file})
  file(STRINGS ${list_file} lines REGEX "^KILN_ACTIVATION")
  set(enumerators "")
  set(count 0)
  foreach(line ${lines})
    if(NOT line MATCHES "^KILN_ACTIVATION\\(([A-Za-z][A-Za-z0-9]*), \"[a-z0-9_]+\", (Unused|AtLeastZero|AboveZero), ")
      message(FATAL_ERROR "${list_file}: '${line}' is not KILN_ACTIVATION(Enumerator, \"name\", "
                          "Unused|AtLeastZero|AboveZero, default alpha, \"PyTorch\")")
    endif()
    string(APPEND enumerators "  ${CMAKE_MATCH_1},\n")
    math(EXPR count "${count} + 1")
  endforeach()
  file(CONFIGURE OUTPUT ${output} CONTENT "#pragma once
// Written by cmake/activations.cmake from src/ops/activation/activation_list.def: the elementwise
// activations besides ReLU, in the list's order. Each is the PyTorch functional of its name
// (kiln::activation_name); src/ops/activation/activation_functions.h holds the math.
#include <cstdint>

namespace kiln {

enum class Activation : uint8_t {
${enumerators}};

inline constexpr int kActivationCount = ${count};

}  // namespace kiln
")
endfunction()
