#pragma once
#include <string>
#include <vector>

#include "kiln/blueprint.h"

namespace kiln::zoo {

Blueprint digits_cnn(int num_classes = 10);            // 20x20x1 handwritten digits
Blueprint vgg16_bn(int num_classes = 1000);            // ImageNet, 224x224x3
Blueprint vgg16_bn_cifar(int num_classes = 10);        // 32x32x3
Blueprint resnet18(int num_classes = 1000);            // ImageNet stem, 224x224x3
Blueprint resnet50(int num_classes = 1000);            // ImageNet stem, 224x224x3
Blueprint resnet18_cifar(int num_classes = 10);        // CIFAR stem (3x3 conv, no pool), 32x32x3
Blueprint resnet50_cifar(int num_classes = 10);

// Looks a model up by name: every model of the zoo, under torchvision's name where torchvision has
// it ("resnet101", "resnext50_32x4d", "vgg19_bn", "mobilenet_v2", ...; names() lists them).
// Each family is one file, src/model/zoo/<family>.cpp. Unknown names throw a kiln::Error listing
// the known ones.
Blueprint by_name(const std::string& name, int num_classes = -1);
std::vector<std::string> names();

}  // namespace kiln::zoo
