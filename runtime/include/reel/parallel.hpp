#pragma once
// Threads. Compiled code splits large kernels into chunks run on a thread pool (oneTBB),
// and CBLAS runs its matrix products on as many threads.
//
//   reel::set_num_threads(n)   n >= 1 threads from now on (0: every core again)
//   REEL_NUM_THREADS=n         the same, read once when Reel first needs it (a value
//                              that is not a count from 1 to 4096: a warning on
//                              standard error, and every core)
//   reel::num_threads()        the count in force (default: every core)
//
// Results do not depend on the thread count: a kernel is cut into the same chunks
// whatever the count (by its size alone, when it is compiled), and the chunks' partial
// sums are combined in chunk order, so one thread and eight give the same bits.
#include <cstdint>
#include <functional>

namespace reel {

// Throws reel::Error for n < 0.
void set_num_threads(int n);
int num_threads();

namespace parallel {

// Runs body(c) for every chunk c in [0, chunks), on up to num_threads() threads (the
// caller's among them); on one thread, or for one chunk, in order on the caller's.
// Nested calls (from within a chunk, or from steps run concurrently) share the pool.
// `body` must not throw.
void for_chunks(int64_t chunks, const std::function<void(int64_t)>& body);

// Runs a() and b() at once (on two threads when there are two), returning when both
// have. Neither may throw.
void invoke(const std::function<void()>& a, const std::function<void()>& b);

}  // namespace parallel
}  // namespace reel
