# Collects the model zoo's families (`extern const ZooFamily k<Name>Models{...}`, one file a family:
# src/model/zoo/<family>.cpp) into one generated list (all_zoo_families(), model/zoo_family.h), so
# adding a model or a family edits no list by hand.
#   kiln_zoo_families(<out var: sources>)
include(${CMAKE_CURRENT_LIST_DIR}/definition_list.cmake)
function(kiln_zoo_families sources_var)
  set(generated ${CMAKE_BINARY_DIR}/generated)
  kiln_definition_list(TYPE ZooFamily SUFFIX Models HEADER model/zoo_family.h FUNCTION all_zoo_families
                       OUTPUT ${generated}/zoo_families.cpp GLOBS src/model/zoo/*.cpp FILES zoo_files)
  set(${sources_var} ${zoo_files} ${generated}/zoo_families.cpp PARENT_SCOPE)
endfunction()
