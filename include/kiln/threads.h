#pragma once
// How many threads kiln's CPU kernels use. The process has one pool of worker threads, shared by
// every Executable and Trainer in it: the calling thread plus threads() - 1 workers, which check
// for the next parallel loop for 50 us, yielding their cores, then sleep on a condition variable
// (so processes sharing the cores do not steal each other's time while one waits). Kernels cut
// their work into pieces whose boundaries depend only on the problem size and combine partial
// results in a fixed order, so the bytes a computation produces do not depend on the thread count.
namespace kiln {

// The threads a parallel loop may use, the calling thread included; >= 1. Until set_threads is
// called: KILN_THREADS when the environment sets it (a whole number from 1 to max_threads();
// anything else is a kiln::Error naming the variable), else available_cores().
int threads();

// Resizes the pool to `n` threads (1 <= n <= max_threads(), else a kiln::Error with the fix).
// Making a CPU Executable whose CompileOptions::cpu.threads is nonzero calls it with that count.
// Waits for a loop running on another thread to finish first; calling it from inside a kernel's
// loop is an error. When the system refuses a thread (too many threads or too little memory for
// their stacks), a kiln::Error names the count and a smaller one to use.
void set_threads(int n);

// The most threads set_threads, KILN_THREADS and `--threads` accept: 4 x available_cores(), and
// at least 64. The pool's threads compute and never block, so threads beyond the cores only take
// turns on them (more switching, a stack each, no speed); 4x leaves room for a machine whose
// cores are hyperthreads or busy with other work. The floor of 64 keeps a count written for a
// bigger machine (a script, a test of thread-count independence) running, correctly if slowly,
// in a 1- or 2-core container; the bytes a computation produces do not depend on the count.
int max_threads();

// The cores this process may run on (its CPU affinity mask, as taskset or a container limits
// it), at least 1.
int available_cores();

}  // namespace kiln
