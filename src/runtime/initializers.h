#pragma once
// The initial values of parameters, buffers and optimizer state (TensorSpec::init): Kaiming normal
// and PyTorch's uniform fan-in bounds, zeros, ones, constants. Made on the host from (seed, the
// tensor's name), so every device and every declaration order starts from the same numbers.
#include <cstddef>
#include <cstdint>

#include "kiln/program.h"

namespace kiln {

// Writes t's initial values into `host` (t.bytes() bytes in t's dtype). False, writing nothing,
// where t has none: Init::None, an activation, or a dtype its initializer does not fill (I32
// state takes constant initializers only; F32 and F64 take any).
bool initial_values(const TensorSpec& t, uint64_t seed, std::byte* host);
// True where initial_values would write only zero bytes: a caller may zero the memory in place.
bool initial_values_are_zeros(const TensorSpec& t);

}  // namespace kiln
