#pragma once
// A family of the model zoo, defined in its own file, src/model/zoo/<family>.cpp, as
// `extern const ZooFamily k<Name>Models{...}`: the family's generator and the models it names, as
// torchvision's module of the same family writes them (its names, parameter names and
// initialization). The build collects every family into one generated list (cmake/zoo_families.cmake),
// so adding a model or a family edits no list by hand; kiln::zoo::by_name looks models up there.
#include <vector>

#include "kiln/blueprint.h"

namespace kiln {

struct ZooModel {
  const char* name;                      // "resnet50": torchvision's name where it has the model
  Blueprint (*make)(int num_classes);
  int default_classes;                   // 1000 for ImageNet's classifiers
};

struct ZooFamily {
  const char* name;  // "resnet", for errors and listings
  std::vector<ZooModel> models;
};

const std::vector<const ZooFamily*>& all_zoo_families();  // generated (cmake/zoo_families.cmake)

}  // namespace kiln
