#pragma once
// libpng's errors for kiln's PNG decoder and encoder: the error callback must not return, so it
// longjmps back to the guarded call rather than throwing through libpng's C frames; the message
// is kept for the kiln::Error. Warnings (a bad ancillary chunk, an odd ICC profile) leave the
// pixels intact; PIL ignores them too.
#include <png.h>

#include <csetjmp>
#include <cstdio>

#include "data/image/longjmp_guard.h"

namespace kiln {

struct PngErrors {
  std::jmp_buf jump;
  char message[256];
};

[[noreturn]] inline void png_jump_on_error(png_structp png, png_const_charp message) {
  auto* errors = static_cast<PngErrors*>(png_get_error_ptr(png));
  std::snprintf(errors->message, sizeof errors->message, "%s", message ? message : "unknown error");
  std::longjmp(errors->jump, 1);
}

inline void png_ignore_warning(png_structp, png_const_charp) {}

}  // namespace kiln
