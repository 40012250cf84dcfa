#pragma once
// Threads. Compiled code splits large kernels into chunks run on a thread pool (oneTBB),
// and matrix products into blocks of rows or columns on the same pool, each block a
// CBLAS call on one thread (Reel sets OpenBLAS to one thread when the pool is set up).
//
//   reel::set_num_threads(n)   n threads from now on (0: every core); at most one per
//                              core is used
//   REEL_NUM_THREADS=n         the same, read once when Reel first needs it (a value
//                              that is not a count from 0 to 4096: a warning on
//                              standard error, and every core)
//   reel::num_threads()        the count in force (default: every core the process
//                              may run on)
//
// Results do not depend on the thread count: a kernel is cut into the same chunks, and
// a product into the same blocks, whatever the count (by its size alone; a product's
// blocks by the machine's core count too, at most two per core), and the chunks'
// partial sums are combined in chunk order, so one thread and eight give the same bits
// on one machine. docs/threads.md.
#include <cstdint>
#include <functional>

namespace reel {

// Throws reel::Error for n < 0 or n > 4096; more threads than cores are not used.
void set_num_threads(int n);
int num_threads();

namespace parallel {

// The cores this process may run on (its affinity mask), fixed for the process.
int cores();

// Runs body(c) for every chunk c in [0, chunks), on up to num_threads() threads (the
// caller's among them); on one thread, or for one chunk, in order on the caller's.
// Nested calls (from within a chunk, or from steps run concurrently) share the pool.
// Chunks run in the caller's floating-point settings. `body` must not throw.
void for_chunks(int64_t chunks, const std::function<void(int64_t)>& body);

}  // namespace parallel
}  // namespace reel
