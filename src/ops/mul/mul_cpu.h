#pragma once
// The mul family's CPU kernels (float and double): the product of an NHWC map with a map of the
// same shape or with a per-channel gate, and its gradients. Every loop is cut into pieces by the
// problem's size alone (core/parallel.h), so any thread count gives the same bytes.
#include <cstdint>

namespace kiln::cpu {

// The extents of a product: a is n images of hw rows of c channels; b is a's shape, or with
// `gate` one row of c channels per image (N x 1 x 1 x C).
struct MulGeom {
  int64_t n = 0, hw = 0, c = 0;
  bool gate = false;
  int64_t map_elements() const { return n * hw * c; }
  int64_t b_elements() const { return gate ? n * c : map_elements(); }
};

// y = a * b (b broadcast over hw for a gate). y may alias a.
template <class T>
void mul_forward(const MulGeom& g, const T* a, const T* b, T* y);

// da = dy * b (b broadcast) where da is given; db = dy * a where db is given, for a gate
// db[n, c] = sum over the image's rows r of dy[n, r, c] * a[n, r, c], products and sum in double,
// rows added in order, rounded once. Outputs must not alias inputs.
template <class T>
void mul_backward(const MulGeom& g, const T* dy, const T* a, const T* b, T* da, T* db);

}  // namespace kiln::cpu
