# The op families' list files of one kind, src/ops/<family>/<family>_<suffix> (op kinds, fused layer
# kinds, ...), sorted by family; each must be named after its folder (a FATAL_ERROR says so), and
# cmake re-runs when one changes.
#   kiln_family_list_files(<suffix> <output variable>)
function(kiln_family_list_files suffix out)
  file(GLOB lists CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ops/*/*_${suffix})
  list(SORT lists)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${lists})
  foreach(list_file ${lists})
    get_filename_component(family_dir ${list_file} DIRECTORY)
    get_filename_component(family ${family_dir} NAME)
    if(NOT list_file STREQUAL "${family_dir}/${family}_${suffix}")
      message(FATAL_ERROR "${list_file}: a family's list is named after its folder: ${family}_${suffix}")
    endif()
  endforeach()
  set(${out} ${lists} PARENT_SCOPE)
endfunction()
