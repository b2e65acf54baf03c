#pragma once
// The layer kinds the compiler's fusions add to a layer graph (kiln::fused_layer::ConvBN, ...).
// They are not part of the model language, so kiln/layer_vocabulary.h does not list them: each op
// family that fuses layers declares its kinds in src/ops/<family>/<family>_layer_kinds.def, and the
// build collects the lists (cmake/fused_layer_kinds.cmake). Their values count up from
// LayerKind::FirstFused in the lists' order; a program lives in one process, so the numbers are
// never stored.
#include <cstdint>

#include "ir/fused_layer_kind_list.h"  // generated: KILN_FUSED_LAYER_KINDS(X)
#include "kiln/layer_vocabulary.h"

namespace kiln {
namespace fused_layer {
namespace detail {
enum Index : uint8_t {
#define KILN_FUSED_LAYER_INDEX(enumerator, name) enumerator,
  KILN_FUSED_LAYER_KINDS(KILN_FUSED_LAYER_INDEX)
#undef KILN_FUSED_LAYER_INDEX
  kCount
};
}  // namespace detail

#define KILN_FUSED_LAYER_CONSTANT(enumerator, name) \
  inline constexpr LayerKind enumerator =           \
      static_cast<LayerKind>(static_cast<uint8_t>(LayerKind::FirstFused) + detail::enumerator);
KILN_FUSED_LAYER_KINDS(KILN_FUSED_LAYER_CONSTANT)
#undef KILN_FUSED_LAYER_CONSTANT

static_assert(static_cast<int>(LayerKind::FirstFused) + detail::kCount <= 255, "too many fused layer kinds");

inline constexpr int kCount = detail::kCount;
// The i-th fused kind, 0 <= i < kCount (to loop over all of them).
constexpr LayerKind kind_at(int i) {
  return static_cast<LayerKind>(static_cast<int>(LayerKind::FirstFused) + i);
}

}  // namespace fused_layer

// Whether `kind` is one a fusion adds (never written in a Blueprint).
inline bool is_fused_layer_kind(LayerKind kind) {
  const int k = static_cast<int>(kind), first = static_cast<int>(LayerKind::FirstFused);
  return k >= first && k < first + fused_layer::detail::kCount;
}

// The name of a fused kind ("conv_bn"), nullptr for any other kind.
const char* fused_layer_kind_name(LayerKind kind);

}  // namespace kiln
