#include "ops/common/pipeline_slices.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

// A CBR backward at batch 256: dconv 64 channels at 224x224 (1.6 GB in fp16), dX the same.
SliceQuery large() {
  SliceQuery q;
  q.batch = 256, q.grad_sample_elems = 224 * 224 * 64, q.input_sample_elems = 224 * 224 * 64, q.elem_bytes = 2;
  return q;
}

TEST(PipelineSlices, OffUnlessRequested) {
  SliceQuery q = large();
  EXPECT_EQ(pipeline_slices(q), 1);
  q.requested = 4;
  EXPECT_EQ(pipeline_slices(q), 4);
}

TEST(PipelineSlices, RequestIsAnUpperBoundThatDividesTheBatch) {
  SliceQuery q = large();
  q.requested = 1;
  EXPECT_EQ(pipeline_slices(q), 1);
  q.requested = 8;
  EXPECT_EQ(pipeline_slices(q), 8);
  q.batch = 6, q.requested = 4;  // 4 does not divide 6: 3 does
  EXPECT_EQ(pipeline_slices(q), 3);
  q.batch = 7;  // prime: only one slice divides it
  EXPECT_EQ(pipeline_slices(q), 1);
  q.batch = 2, q.requested = 8;  // never more slices than samples
  EXPECT_EQ(pipeline_slices(q), 2);
}

TEST(PipelineSlices, SliceStartsStayAlignedForCudnnAndTheBitMask) {
  SliceQuery q = large();
  q.requested = 4;
  q.batch = 4, q.grad_sample_elems = 9 * 9 * 8, q.input_sample_elems = 9 * 9 * 3;  // dX rows of 3 channels
  // 81 * 3 * 2 bytes per input sample is not a multiple of 16, nor are 2 samples; 4 is the batch.
  EXPECT_EQ(pipeline_slices(q), 1);
  q.input_sample_elems = 9 * 9 * 8;
  EXPECT_EQ(pipeline_slices(q), 4);
  q.grad_sample_elems = 5 * 5 * 3, q.input_sample_elems = 5 * 5 * 8, q.elem_bytes = 4;  // 75 mask bits a sample
  EXPECT_EQ(pipeline_slices(q), 1);
}

TEST(PipelineSlices, AnyHazardOrDegenerateShapeMeansOneSlice) {
  SliceQuery q = large();
  q.requested = 4, q.hazard = true;
  EXPECT_EQ(pipeline_slices(q), 1);
  q.hazard = false, q.batch = 1;
  EXPECT_EQ(pipeline_slices(q), 1);
  q.batch = 256, q.grad_sample_elems = 0;
  EXPECT_EQ(pipeline_slices(q), 1);
}

}  // namespace
}  // namespace kiln
