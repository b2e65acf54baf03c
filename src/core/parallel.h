#pragma once
// Parallel loops of the CPU kernels, on the process's one pool (kiln/threads.h).
//
// Determinism: a loop is cut into pieces by the caller, from the problem size alone, never from
// the thread count; any thread may run any piece, so a piece writes only its own outputs (or its
// own partial result, combined afterwards in piece order). Then 1, 2 or 64 threads produce the
// same bytes.
#include <algorithm>
#include <cstdint>

#include "core/thread_pool.h"

namespace kiln {

// Runs task(i) for every i in [0, count) on the process's pool and returns when all have run;
// the first exception a task throws reaches the caller. Runs serially, on the calling thread,
// when count is 1, when the pool has one thread, inside another parallel loop, or while another
// thread's loop holds the pool (waiting for it would idle this thread; running serially keeps
// both busy and gives the same result).
void parallel_for(int64_t count, TaskRef task);

template <class F>
void parallel_for(int64_t count, F&& task) {
  parallel_for(count, TaskRef(task));
}

// The pieces [0, n) is cut into by parallel_blocks: `block` elements each, the last shorter.
inline int64_t block_count(int64_t n, int64_t block) { return n <= 0 ? 0 : (n + block - 1) / block; }

// Runs body(begin, end) over [0, n) cut into consecutive blocks of `block` elements (the last
// one shorter); the boundaries depend on n and block only.
template <class F>
void parallel_blocks(int64_t n, int64_t block, F&& body) {
  block = std::max<int64_t>(block, 1);
  parallel_for(block_count(n, block), [&](int64_t b) { body(b * block, std::min(n, (b + 1) * block)); });
}

// Runs f(i) for every i in [0, n), in blocks of `block` indices on the pool: elementwise work
// whose every result depends on its index alone (counter-based random fills, core/random.h).
template <class F>
void parallel_each(int64_t n, int64_t block, F&& f) {
  parallel_blocks(n, block, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) f(i);
  });
}

}  // namespace kiln
