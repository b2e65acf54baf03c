// The digits demo's network: kiln's own, for 20x20 grey handwritten digits.
#include "model/zoo_family.h"

namespace kiln {
namespace {

// Two 3x3 stages with max pooling, then a small classifier: about 0.3 MFLOP-scale per
// image per layer, so the digits demo trains to >98.5% in well under a minute on 2 cores.
Blueprint digits_cnn(int num_classes) {
  Blueprint m("digits_cnn");
  m.input(20, 20, 1);
  m.cbr(32, 3, 1, 1, "conv1").cbr(32, 3, 1, 1, "conv2").maxpool(2, 2, 0, "pool1");
  m.cbr(64, 3, 1, 1, "conv3").cbr(64, 3, 1, 1, "conv4").maxpool(2, 2, 0, "pool2");
  m.flatten("flatten").fc(128, true, "fc1").relu("relu1").dropout(0.25, "drop1");
  m.fc(num_classes, true, "fc2");
  return m;
}

}  // namespace

extern const ZooFamily kDigitsModels{"digits", {{"digits_cnn", digits_cnn, 10}}};

}  // namespace kiln
