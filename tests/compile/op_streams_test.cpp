// Where the ops run on the GPU, placed once by compile() (src/compile/op_streams.h) and carried
// by the Program: in a CUDA program the CBR's and the block end's backward leave their wgrad
// running beside the next op, nothing else does, and a CPU program, whose ops run one by one, has
// no such op. The GPU runs them in tests/gpu/op_overlap_gpu_test.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "kiln/compile.h"
#include "kiln/zoo.h"

namespace kiln {
namespace {

Program resnet50(Device device) {
  CompileOptions o;
  o.device = device, o.precision = device == Device::CUDA ? Precision::FP16 : Precision::FP32, o.batch = 2;
  o.input_hwc = {64, 64, 3};
  return compile(zoo::resnet50(10), o);
}

bool leaves_side_work(OpKind kind) {
  return kind == OpKind::CBR_BWD || kind == OpKind::CBR_BWD_FIRST || kind == OpKind::CONV_BN_BWD;
}

TEST(OpStreams, OnTheGpuTheFusedBackwardsLeaveTheirWgradBesideTheNextOp) {
  const Program p = resnet50(Device::CUDA);
  int outliving = 0;
  for (const Op& op : p.backward) {
    EXPECT_EQ(op.side_work_outlives, leaves_side_work(op.kind)) << op_kind_name(op.kind);
    outliving += op.side_work_outlives;
  }
  EXPECT_EQ(outliving, 33 + 16 + 4);  // every CBR and conv_bn backward (bodies and projections)
  for (const std::vector<Op>* ops : {&p.forward, &p.update, &p.inference, &p.refresh_copies})
    for (const Op& op : *ops) EXPECT_FALSE(op.side_work_outlives) << op_kind_name(op.kind);
}

TEST(OpStreams, OnTheCpuNoOpOutlivesItself) {
  const Program p = resnet50(Device::CPU);
  for (const std::vector<Op>* ops : {&p.forward, &p.backward, &p.update, &p.inference, &p.refresh_copies})
    for (const Op& op : *ops) EXPECT_FALSE(op.side_work_outlives) << op_kind_name(op.kind);
}

}  // namespace
}  // namespace kiln
