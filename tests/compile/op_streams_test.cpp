// The ops' streams derived from their reads and writes (src/ir/op_streams.h): where ResNet's
// projection shortcuts go, that every two ops sharing bytes one of them writes stay in order
// (unordered_op_pair), and that this check finds a missing wait. The GPU runs them in
// tests/gpu/op_streams_gpu_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/op_streams.h"
#include "kiln/compile.h"
#include "kiln/zoo.h"

namespace kiln {
namespace {

Program resnet(bool branch, Precision precision = Precision::FP16) {
  CompileOptions o;
  o.device = Device::CUDA, o.precision = precision, o.batch = 4;
  o.input_hwc = {64, 64, 3};
  o.cuda.branch_streams = branch;
  return compile(zoo::resnet18(10), o);
}

const std::string& layer_name(const Program& p, const Op& op) { return p.graph.layers.at(size_t(op.layer)).name; }

bool is_projection(const Program& p, const Op& op) {
  return op.layer >= 0 && layer_name(p, op).find("downsample") != std::string::npos;
}

// ResNet-18's three projection shortcuts run beside their blocks' bodies: in the forward each
// shortcut's conv + BN is on the branch stream and every layer of the bodies on the main one; in
// the backward each shortcut's and its body's conv + BN backward sit on different streams. Every
// list keeps its dependent ops in order.
TEST(OpStreams, ProjectionShortcutsRunBesideTheirBlocksBodies) {
  for (Precision precision : {Precision::FP16, Precision::FP32}) {
    SCOPED_TRACE(precision_name(precision));
    const Program p = resnet(true, precision);
    int forward_projections = 0;
    for (const Op& op : p.forward) {
      if (is_projection(p, op)) {
        EXPECT_EQ(op.stream, 1) << layer_name(p, op);
        forward_projections += op.stream == 1;
      } else if (op.kind == OpKind::CBR_FWD || op.kind == OpKind::CONV_BN_FWD || op.kind == OpKind::BN_ADD_RELU_FWD) {
        EXPECT_EQ(op.stream, 0) << layer_name(p, op);
      }
    }
    EXPECT_EQ(forward_projections, 3);
    int beside = 0;
    for (const Op& shortcut : p.backward) {
      if (shortcut.kind != OpKind::CONV_BN_BWD || !is_projection(p, shortcut)) continue;
      const std::string block = layer_name(p, shortcut).substr(0, layer_name(p, shortcut).find(".downsample"));
      for (const Op& body : p.backward)
        if (body.kind == OpKind::CONV_BN_BWD && !is_projection(p, body) && layer_name(p, body).rfind(block + ".", 0) == 0)
          beside += body.stream != shortcut.stream;
    }
    EXPECT_EQ(beside, 3);
    int waits = 0;
    for (const std::vector<Op>* ops : {&p.forward, &p.backward, &p.update, &p.inference}) {
      EXPECT_EQ(unordered_op_pair(p, *ops), "");
      for (const Op& op : *ops) waits += op.wait_back > 0;
    }
    EXPECT_GE(waits, 6);  // each shortcut waits for its block's input, and its block end for it
  }
}

// Larger and other networks keep every dependent pair in order too; ResNet-50's four projections
// run on the branch in the forward.
TEST(OpStreams, ZooModelsKeepTheirOrder) {
  for (const char* model : {"resnet50", "vgg16_bn", "digits_cnn"}) {
    SCOPED_TRACE(model);
    CompileOptions o;
    o.device = Device::CUDA, o.precision = Precision::FP16, o.batch = 2, o.cuda.branch_streams = true;
    if (std::string(model) != "digits_cnn") o.input_hwc = {64, 64, 3};
    const Program p = compile(zoo::by_name(model, 10), o);
    for (const std::vector<Op>* ops : {&p.forward, &p.backward, &p.update, &p.inference})
      EXPECT_EQ(unordered_op_pair(p, *ops), "");
    if (std::string(model) == "resnet50") {
      int projections = 0;
      for (const Op& op : p.forward) projections += op.stream == 1 && is_projection(p, op);
      EXPECT_EQ(projections, 4);
    }
  }
}

// Without the branch streams, and on the CPU, every op runs on the main stream with no waits.
TEST(OpStreams, OneStreamUnlessAsked) {
  Program off = resnet(false);
  CompileOptions cpu;
  cpu.batch = 2, cpu.input_hwc = {64, 64, 3}, cpu.cuda.branch_streams = true;
  Program on_cpu = compile(zoo::resnet18(10), cpu);
  for (const Program* p : {&off, &on_cpu})
    for (const std::vector<Op>* ops : {&p->forward, &p->backward, &p->update, &p->inference})
      for (const Op& op : *ops) {
        EXPECT_EQ(op.stream, 0);
        EXPECT_EQ(op.wait_back, 0);
        EXPECT_FALSE(op.signals);
      }
  // Placing them again follows the setting: the three projections, and the count of correct rows
  // beside the loss (both read the logits only).
  assign_op_streams(off, true);
  EXPECT_EQ(branch_stream_ops(off.forward), 4);
  assign_op_streams(off, false);
  EXPECT_EQ(branch_stream_ops(off.forward), 0);
}

// The check finds a dropped wait and an op moved to the other stream without one.
TEST(OpStreams, TheOrderCheckFindsAMissingWait) {
  const Program p = resnet(true);
  for (std::vector<Op> Program::*list : {&Program::forward, &Program::backward}) {
    const std::vector<Op>& ops = p.*list;
    size_t waiting = 0;
    while (waiting < ops.size() && ops[waiting].wait_back == 0) ++waiting;
    ASSERT_LT(waiting, ops.size());
    Program dropped = p;
    (dropped.*list)[waiting].wait_back = 0;
    EXPECT_NE(unordered_op_pair(dropped, dropped.*list), "") << "a dropped wait went unnoticed";
  }
  // The forward's second op depends on its first (the stem reads the cast input): on the other
  // stream without a wait it could run first.
  Program moved = p;
  ASSERT_EQ(moved.forward[1].stream, 0);
  moved.forward[1].stream = 1;
  EXPECT_NE(unordered_op_pair(moved, moved.forward), "");
}

// Bytes the memory plan hands from one tensor to another order the ops as data does: an op that
// writes where an earlier op still read (write after read) waits for it, though it reads nothing
// that op wrote.
TEST(OpStreams, ReusedBytesOrderTheOps) {
  Program p;
  p.tensors.resize(4);
  for (TensorSpec& t : p.tensors) t.shape = {64}, t.dtype = DType::F32;  // 256 bytes each
  p.memory.offset = {0, 256, 512, 0};  // tensor 3 reuses tensor 0's bytes
  Op a{OpKind::GRAD_SUM, -1, {}, {0}, {}};          // writes 0
  Op b{OpKind::GRAD_SUM, -1, {0}, {1}, {}};         // reads 0
  Op c{OpKind::GRAD_SUM, -1, {}, {2}, {}};          // independent: may go beside
  Op d{OpKind::GRAD_SUM, -1, {}, {3}, {}};          // overwrites 0's bytes: after b
  p.forward = {a, b, c, d};
  assign_op_streams(p, true);
  EXPECT_EQ(p.forward[2].stream, 1);
  EXPECT_EQ(unordered_op_pair(p, p.forward), "");
  // d runs after b: on b's stream, or waiting for it.
  EXPECT_TRUE(p.forward[3].stream == p.forward[1].stream || p.forward[3].wait_back == 2);
  Program wrong = p;
  wrong.forward[3].stream = 1 - p.forward[1].stream, wrong.forward[3].wait_back = 0;
  EXPECT_NE(unordered_op_pair(wrong, wrong.forward), "");
}

}  // namespace
}  // namespace kiln
