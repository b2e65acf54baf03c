#pragma once
// The C libraries' way out of an error (libjpeg, libpng): their error callbacks longjmp back to
// the frame that called setjmp, here guarded().
#include <csetjmp>

namespace kiln {

// Runs `body`; false when the library failed inside it (its callback longjmped to errors.jump).
// Between setjmp and longjmp there may be no C++ object with a destructor (longjmp would skip
// it), so bodies only call the library and write through references to objects that live
// outside.
template <class Errors, class Body>
bool guarded(Errors& errors, Body&& body) {
  if (setjmp(errors.jump) != 0) return false;
  body();
  return true;
}

}  // namespace kiln
