// The zoo's lookup over its families (src/model/zoo/<family>.cpp, collected by the build into
// all_zoo_families()).
#include "kiln/zoo.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "kiln/error.h"
#include "model/zoo_family.h"

namespace kiln::zoo {
namespace {

// Every model by name; two families naming one model is a mistake of the build, said at first use.
const std::map<std::string, const ZooModel*>& table() {
  static const std::map<std::string, const ZooModel*> models = [] {
    std::map<std::string, const ZooModel*> all;
    for (const ZooFamily* family : all_zoo_families())
      for (const ZooModel& model : family->models)
        if (!all.emplace(model.name, &model).second)
          fail("internal: the zoo names model '{}' twice (family '{}' and another)", model.name, family->name);
    return all;
  }();
  return models;
}

}  // namespace

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto& [name, model] : table()) out.push_back(name);
  return out;
}

Blueprint by_name(const std::string& name, int num_classes) {
  auto it = table().find(name);
  if (it == table().end())
    fail("unknown model '{}': known models are {}", name, fmt::join(names(), ", "));
  if (num_classes == 0 || num_classes < -1)
    fail("model '{}': number of classes must be positive, got {}", name, num_classes);
  return it->second->make(num_classes > 0 ? num_classes : it->second->default_classes);
}

Blueprint digits_cnn(int num_classes) { return by_name("digits_cnn", num_classes); }
Blueprint vgg16_bn(int num_classes) { return by_name("vgg16_bn", num_classes); }
Blueprint vgg16_bn_cifar(int num_classes) { return by_name("vgg16_bn_cifar", num_classes); }
Blueprint resnet18(int num_classes) { return by_name("resnet18", num_classes); }
Blueprint resnet50(int num_classes) { return by_name("resnet50", num_classes); }
Blueprint resnet18_cifar(int num_classes) { return by_name("resnet18_cifar", num_classes); }
Blueprint resnet50_cifar(int num_classes) { return by_name("resnet50_cifar", num_classes); }

}  // namespace kiln::zoo
