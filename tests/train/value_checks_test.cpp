// The Trainer refuses, before it trains a step, what cannot work: a test set of another image size
// than the training set, a warm-up as long as the run, a padded crop as large as the images; and a
// model given images smaller than its poolings and strides allow says how large they must be
// (issue 20, items 6 and 7).
#include <gtest/gtest.h>

#include "kiln/compile.h"
#include "kiln/zoo.h"
#include "support/cpu_test_util.h"
#include "train/tiny_run.h"

namespace kiln {
namespace {

using testing::contains;
using testing::error_of;
using testing::expect_error;
using testing::tiny_compile;
using testing::tiny_dataset;
using testing::tiny_model;
using testing::tiny_train;

// tiny_dataset's images at another side: the same labels, the first 8x8 pixels' values repeated.
Dataset resized(const Dataset& d, int side) {
  Dataset out = d;
  out.height = out.width = side;
  out.images.assign(size_t(d.count) * side * side, 0);
  for (int64_t i = 0; i < d.count; ++i)
    for (int p = 0; p < side * side; ++p) out.images[size_t(i * side * side + p)] = d.images[size_t(i * 64 + p % 64)];
  return out;
}

TEST(ValueChecks, ATestSetOfAnotherSizeIsRefusedBeforeTheFirstStep) {
  Trainer trainer(tiny_model(), tiny_compile(), tiny_train(2));
  int steps = 0;
  const std::string msg = error_of([&] {
    trainer.fit(tiny_dataset(), resized(tiny_dataset(32), 12), [&](const StepReport&) { ++steps; });
  });
  EXPECT_TRUE(contains(msg, "test set has 12x12x1 images but the training set has 8x8x1")) << msg;
  EXPECT_TRUE(contains(msg, "nothing was trained")) << msg;
  EXPECT_TRUE(contains(msg, "Give a test set of 8x8x1 images")) << msg;
  EXPECT_EQ(steps, 0);
  // An empty test set is no test set: training goes on.
  EXPECT_EQ(trainer.fit(tiny_dataset(), Dataset{}).size(), 2u);
}

TEST(ValueChecks, ATestSetWithMoreClassesThanTheModelIsRefusedBeforeTheFirstStep) {
  Trainer trainer(tiny_model(), tiny_compile(), tiny_train(1));
  Dataset test = tiny_dataset(16);
  test.num_classes = 5;
  int steps = 0;
  expect_error([&] { trainer.fit(tiny_dataset(), test, [&](const StepReport&) { ++steps; }); },
               {"test set has 5 classes but the model outputs 3"});
  EXPECT_EQ(steps, 0);
}

TEST(ValueChecks, AWarmUpAsLongAsTheRunIsRefused) {
  TrainOptions t = tiny_train(3);
  t.schedule.warmup_epochs = 3;
  expect_error([&] { Trainer(tiny_model(), tiny_compile(), t); },
               {"a warm-up of 3 epochs is not shorter than the run (3 epochs)", "warmup_epochs", "--warmup"});
  t.schedule.warmup_epochs = 2;
  Trainer ok(tiny_model(), tiny_compile(), t);  // shorter: accepted
}

TEST(ValueChecks, APaddedCropAsLargeAsTheImagesIsRefused) {
  TrainOptions t = tiny_train(1);
  t.augment.pad_crop = 8;
  Trainer trainer(tiny_model(), tiny_compile(), t);
  int steps = 0;
  expect_error([&] { trainer.fit(tiny_dataset(), Dataset{}, [&](const StepReport&) { ++steps; }); },
               {"pad (8, TrainOptions::augment.pad_crop, kiln train --crop-pad) is not smaller than the training "
                "images' side (8)",
                "use a pad below 8"});
  EXPECT_EQ(steps, 0);
  t.augment.pad_crop = 7;
  Trainer ok(tiny_model(), tiny_compile(), t);
  EXPECT_EQ(ok.fit(tiny_dataset(), Dataset{}).size(), 1u);
}

TEST(ValueChecks, TheSmallestInputOfAModelIsFoundByItsShapes) {
  CompileOptions c;
  c.input_hwc = {20, 20, 1};
  // Five 2x2 poolings of stride 2 need 2^5 pixels; digits_cnn's two need 4.
  EXPECT_EQ(min_input_side(zoo::vgg16_bn_cifar(), c), 32);
  EXPECT_EQ(min_input_side(zoo::vgg16_bn(), c), 32);
  EXPECT_EQ(min_input_side(zoo::digits_cnn(), c), 4);
  // tiny_model: one 2x2 pooling of stride 2.
  EXPECT_EQ(min_input_side(tiny_model(), c), 2);
  // The compiler names the sizes instead of the layer where the image ran out.
  const std::string msg = error_of([&] { compile(zoo::vgg16_bn_cifar(), c); });
  EXPECT_TRUE(contains(msg, "model 'vgg16_bn_cifar' needs inputs of at least 32x32 pixels but is given 20x20")) << msg;
  EXPECT_TRUE(contains(msg, "Use images of at least 32x32")) << msg;
  // A model that fails at every size keeps its own error.
  Blueprint no_classifier("no_classifier");
  no_classifier.input(8, 8, 1).conv(4, 3, 1, 1);
  EXPECT_EQ(min_input_side(no_classifier, c), 0);
  const std::string own = error_of([&] { compile(no_classifier, c); });
  EXPECT_TRUE(contains(own, "a classifier must end in (N, classes)")) << own;
}

}  // namespace
}  // namespace kiln
