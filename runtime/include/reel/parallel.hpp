#pragma once
// Threads. Compiled code splits large kernels into chunks run on a thread pool (oneTBB),
// and CBLAS runs its matrix products on its own threads.
//
//   reel::set_num_threads(n)   n threads from now on (0: every core), for Reel's pool
//                              and OpenBLAS's; at most one per core is used
//   REEL_NUM_THREADS=n         the same, read once when Reel first needs it (a value
//                              that is not a count from 0 to 4096: a warning on
//                              standard error, and every core)
//   reel::num_threads()        the count in force (default: every core the process
//                              may run on; OpenBLAS then keeps its own count)
//
// Reel's kernels give the same bits on any number of threads: a kernel is cut into the
// same chunks whatever the count (by its size alone, when it is compiled), and the
// chunks' partial sums are combined in chunk order. Matrix products are OpenBLAS's,
// which may split a product differently on another thread count: those can differ in
// the last bits between counts (never between calls at one count). docs/threads.md.
#include <cstdint>
#include <functional>

namespace reel {

// Throws reel::Error for n < 0 or n > 4096; more threads than cores are not used.
void set_num_threads(int n);
int num_threads();

namespace parallel {

// Runs body(c) for every chunk c in [0, chunks), on up to num_threads() threads (the
// caller's among them); on one thread, or for one chunk, in order on the caller's.
// Nested calls (from within a chunk, or from steps run concurrently) share the pool.
// Chunks run in the caller's floating-point settings. `body` must not throw.
void for_chunks(int64_t chunks, const std::function<void(int64_t)>& body);

}  // namespace parallel
}  // namespace reel
