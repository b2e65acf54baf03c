// The op families' cost rules (src/ops/<family>/<family>_op_costs.cpp, read by `kiln bench
// --profile` for its floors) on whole zoo programs, against numbers computed apart from them:
// torchvision's published multiply-adds of ResNet-50 and VGG16-BN, the backward's two passes per
// convolution (one where a layer computes no dX), and the optimizer's traffic from the parameter
// count.
#include <gtest/gtest.h>

#include "kiln/compile.h"
#include "kiln/zoo.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

struct Totals {
  double forward_flops = 0, backward_flops = 0, update_bytes = 0;
};

Totals totals(const Program& p) {
  Totals t;
  for (const Op& op : p.forward) t.forward_flops += op_cost(p, op).flops;
  for (const Op& op : p.backward) t.backward_flops += op_cost(p, op).flops;
  for (const Op& op : p.update) t.update_bytes += op_cost(p, op).bytes;
  return t;
}

Program training_program(const Blueprint& model, int batch) {
  CompileOptions o;
  o.batch = batch;
  return compile(model, o);
}

// The flops of the first convolution's forward: the one layer whose backward makes no dX.
double first_conv_flops(const Program& p) {
  for (const Op& op : p.forward)
    if (op.kind == OpKind::CBR_FWD || op.kind == OpKind::CONV_FWD) return op_cost(p, op).flops;
  return 0;
}

TEST(OpCosts, ForwardFlopsAreTorchvisionsMultiplyAddsTwice) {
  // torchvision's model tables: ResNet-50 4.09 GFLOPS, VGG16-BN 15.47 (multiply-adds per 224x224
  // image, rounded to 0.01): the convolutions and linear layers alone, as the rules count them.
  const int batch = 2;
  const struct {
    const char* name;
    Blueprint model;
    double giga_macs;
  } cases[] = {{"resnet50", zoo::resnet50(), 4.09}, {"vgg16_bn", zoo::vgg16_bn(), 15.47}};
  for (const auto& c : cases) {
    const Totals t = totals(training_program(c.model, batch));
    const double per_image = t.forward_flops / batch;
    EXPECT_NEAR(per_image, 2 * c.giga_macs * 1e9, 2 * 0.006e9) << c.name;
  }
}

TEST(OpCosts, TheBackwardIsTwoPassesOfEveryConvolutionButTheFirst) {
  // dW and dX for every convolution and linear layer; the stem reads the data batch, whose gradient
  // nobody needs, so its backward is one pass. Counting fused backward ops (CBR_BWD, CONV_BN_BWD)
  // as one pass, or the stem's as two, breaks the equality.
  for (const Blueprint& model : {zoo::resnet50(), zoo::digits_cnn()}) {
    const Program p = training_program(model, 4);
    const Totals t = totals(p);
    ASSERT_GT(t.forward_flops, 0);
    EXPECT_NEAR(t.backward_flops, 2 * t.forward_flops - first_conv_flops(p), 1e-9 * t.forward_flops);
  }
}

TEST(OpCosts, SgdWithMomentumReadsAndRewritesParametersAndMomentum) {
  // fp32 on the CPU: gradients read, parameters and momentum read and written: 5 x 4 bytes a
  // parameter, plus the few scalars the update reads.
  const Program p = training_program(zoo::digits_cnn(), 8);
  ASSERT_GE(p.param_region, 0);
  const double params = double(numel(p.tensors[p.param_region].shape));  // every parameter, one region
  ASSERT_GT(params, 1000);
  const double bytes = totals(p).update_bytes;
  EXPECT_GE(bytes, 5 * 4 * params);
  EXPECT_LE(bytes, 5 * 4 * params + 64);
}

}  // namespace
}  // namespace kiln
