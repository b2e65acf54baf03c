#pragma once
// libjpeg's fatal errors for kiln's JPEG decoder and encoder: error_exit must not return, so it
// longjmps back to the guarded call instead of throwing (an exception would have to unwind
// through libjpeg's C frames); the message is kept for the kiln::Error.
#include <jpeglib.h>

#include <csetjmp>

#include "data/image/longjmp_guard.h"

namespace kiln {

struct JpegErrors {
  jpeg_error_mgr pub;  // first: libjpeg hands callbacks a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] inline void jpeg_jump_on_error(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

}  // namespace kiln
