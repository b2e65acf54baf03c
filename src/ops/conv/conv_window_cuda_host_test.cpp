// The convolution's window on the CUDA side, checked on the host (no GPU needed): the cuDNN
// problem's output size and text (part of every plan cache key, in memory and on disk), the op's
// checks of grouped filters, and the refusal that keeps kiln's own kernels to square windows.
#include <gtest/gtest.h>

#include <string>

#include "core/conv_window.h"
#include "ops/conv/conv_cuda.h"
#include "runtime/cuda/cudnn_graphs.h"
#include "support/cpu_test_util.h"
#include "support/op_bench.h"

namespace kiln::cuda {
namespace {

using testing::expect_error;

// stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, dilation_h, dilation_w, groups.
const ConvWindow kUneven{2, 1, 1, 0, 2, 1, 2, 1, 4};

TEST(ConvWindowCuda, ProblemSizesFollowPyTorch) {
  // PyTorch: floor((H + top + bottom - dilation (R - 1) - 1) / stride) + 1, per axis.
  const ConvProblem p = make_conv_problem(2, 12, 11, 16, 8, 3, 5, kUneven, DType::F16);
  EXPECT_EQ(p.ho, (12 + 1 + 2 - 2 * 2 - 1) / 2 + 1);  // 6
  EXPECT_EQ(p.wo, (11 + 0 + 1 - 1 * 4 - 1) / 1 + 1);  // 8
  EXPECT_EQ(p.filter_c(), 4);
  EXPECT_EQ(p.win, kUneven);
  // The square overload is the window of one stride and one padding.
  const ConvProblem q = make_conv_problem(2, 9, 9, 8, 16, 3, 3, 2, 1, DType::F32);
  EXPECT_EQ(q.win, ConvWindow::square(2, 1));
  EXPECT_EQ(q.ho, 5);
  EXPECT_EQ(q.wo, 5);
}

TEST(ConvWindowCuda, ProblemTextNamesEveryWindowFieldAndKeepsTheSquareOne) {
  // A square problem's text is the plan cache key's part that earlier runs stored: unchanged.
  EXPECT_EQ(conv_problem_str(make_conv_problem(2, 9, 9, 8, 16, 3, 3, 2, 1, DType::F16)),
            "N=2 9x9 C=8 -> K=16 3x3 stride 2 pad 1 out 5x5 F16");
  EXPECT_EQ(conv_problem_str(make_conv_problem(2, 12, 11, 16, 8, 3, 5, kUneven, DType::BF16)),
            "N=2 12x11 C=16 -> K=8 3x5 stride 2x1 pad t1 l0 b2 r1 dilation 2x1 groups 4 out 6x8 BF16");
  // Each field alone changes the text (so the key): no two windows share a plan.
  const ConvWindow base = ConvWindow::square(1, 1);
  const std::string square = conv_problem_str(make_conv_problem(1, 9, 9, 8, 8, 3, 3, base, DType::F32));
  for (int field = 0; field < 9; ++field) {
    ConvWindow v = base;
    int* fields[] = {&v.stride_h, &v.stride_w, &v.pad_top,    &v.pad_left, &v.pad_bottom,
                     &v.pad_right, &v.dilation_h, &v.dilation_w, &v.groups};
    *fields[field] += 1;
    if (field == 8) v.groups = 2;
    EXPECT_NE(conv_problem_str(make_conv_problem(1, 9, 9, 8, 8, 3, 3, v, DType::F32)), square) << "field " << field;
  }
}

TEST(ConvWindowCuda, OwnKernelsRefuseWindowsThatAreNotSquare) {
  const ConvShape s = conv_shape(make_conv_problem(2, 9, 9, 8, 16, 3, 3, 2, 1, DType::F16));
  EXPECT_EQ(s.stride, 2);
  EXPECT_EQ(s.pad, 1);
  EXPECT_EQ(s.ho, 5);
  for (const ConvWindow& v : {kUneven, ConvWindow{1, 1, 1, 1, 1, 1, 1, 1, 2}, ConvWindow{1, 1, 1, 1, 1, 1, 2, 2, 1},
                              ConvWindow{2, 1, 1, 1, 1, 1, 1, 1, 1}, ConvWindow{1, 1, 1, 0, 1, 1, 1, 1, 1}})
    expect_error([&] { conv_shape(make_conv_problem(2, 12, 11, 16, 8, 3, 3, v, DType::F16)); },
                 {"square windows", "cuDNN"});
}

TEST(ConvWindowCuda, OpChecksTheFilterOfItsGroups) {
  testing::OpBench bench(0, "features.3", LayerKind::Conv);
  Op op;
  op.kind = OpKind::CONV_FWD, op.layer = 0;
  OpCall call{op, bench.program, {}, {}, bench.scalars};
  std::vector<char> memory(64);
  auto arg = [&](Shape shape) { return bench.arg(std::move(shape), memory.data(), DType::F16); };
  const ConvWindow groups4{1, 1, 1, 1, 1, 1, 1, 1, 4};
  // (K, R, S, C/groups): 16 input channels in 4 groups take filters of 4 channels.
  const ConvProblem p = conv_problem(call, arg({2, 9, 9, 16}), arg({8, 3, 3, 4}), arg({2, 9, 9, 8}), groups4);
  EXPECT_EQ(p.c, 16);
  EXPECT_EQ(p.filter_c(), 4);
  expect_error([&] { conv_problem(call, arg({2, 9, 9, 16}), arg({8, 3, 3, 16}), TensorArg{}, groups4); },
               {"CONV_FWD 'features.3'", "channels / groups", "4 groups"});
  expect_error([&] { conv_problem(call, arg({2, 9, 9, 16}), arg({6, 3, 3, 4}), TensorArg{}, groups4); },
               {"6 output channels", "4 groups"});
  expect_error([&] { conv_problem(call, arg({2, 9, 9, 16}), arg({8, 3, 3, 4}), arg({2, 9, 9, 4}), groups4); },
               {"needs [2,9,9,8]"});
}

}  // namespace
}  // namespace kiln::cuda
