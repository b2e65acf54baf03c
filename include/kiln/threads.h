#pragma once
// How many threads kiln's CPU kernels use. The process has one pool of worker threads, shared by
// every Executable and Trainer in it: the calling thread plus threads() - 1 workers, which sleep
// on a condition variable between parallel loops (they never spin, so processes sharing the cores
// do not steal each other's time). Kernels cut their work into pieces whose boundaries depend only
// on the problem size and combine partial results in a fixed order, so the bytes a computation
// produces do not depend on the thread count.
namespace kiln {

// The threads a parallel loop may use, the calling thread included; >= 1. Until set_threads is
// called: KILN_THREADS when the environment sets it (a whole number >= 1; anything else is a
// kiln::Error naming the variable), else available_cores().
int threads();

// Resizes the pool to `n` threads (n >= 1, else a kiln::Error with the fix). Waits for a loop
// running on another thread to finish first; calling it from inside a kernel's loop is an error.
void set_threads(int n);

// The cores this process may run on (its CPU affinity mask, as taskset or a container limits
// it), at least 1.
int available_cores();

}  // namespace kiln
