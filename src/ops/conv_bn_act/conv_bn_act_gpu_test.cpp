// The conv_bn_act layer on the GPU (BN_ACT's CUDA kernels, the convolutions on cuDNN): the network
// of support/conv_bn_act_network.h in fp32 without TF32, fused against --no-fuse on the GPU and
// against the fused program on the CPU, one training step and one inference, for every activation.
// fp32's rounding through five layers in other summation orders stays within 1e-4 (the CPU's fused
// vs unfused: at most 6.2e-7); another activation lies 0.35 away (conv_bn_act_test.cpp).
#include <gtest/gtest.h>

#include <string>

#include "support/conv_bn_act_network.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using testing::conv_bn_act::activations;
using testing::conv_bn_act::ActivationCase;
using testing::conv_bn_act::expect_within;
using testing::conv_bn_act::gaps;
using testing::conv_bn_act::network;
using testing::conv_bn_act::NetworkRun;
using testing::conv_bn_act::run;

TEST(ConvBnActGpu, EveryActivationTrainsAsTheUnfusedLayersAndAsOnTheCpu) {
  KILN_REQUIRE_GPU();
  for (const ActivationCase& a : activations()) {
    const Blueprint bp = network(a.add);
    const NetworkRun gpu = run(bp, true, Precision::FP32, Device::CUDA);
    EXPECT_EQ(gpu.fused_layers, a.name == "relu" ? 4 : 5) << a.name;
    expect_within(gaps(gpu, run(bp, false, Precision::FP32, Device::CUDA)), 1e-4, a.name + " GPU fused vs unfused");
    expect_within(gaps(gpu, run(bp, true, Precision::FP32, Device::CPU)), 1e-4, a.name + " GPU vs CPU");
  }
}

}  // namespace
}  // namespace kiln
