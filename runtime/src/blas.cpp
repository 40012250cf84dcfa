#include "reel/blas.hpp"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "exit_gate.hpp"
#include "reel/parallel.hpp"

// Products on Reel's thread pool: CBLAS runs on one thread (parallel.cpp sets OpenBLAS
// so), and a large product is cut into blocks of rows or columns of its result, each a
// CBLAS call of its own on the pool. One pool for everything: OpenBLAS's own threads,
// spinning between calls, slowed Reel's chunked kernels and were slowed by them (the
// MLP gradient on 2 threads: 893 us, 655 us without Reel's chunks). The blocks depend on
// the product's shape alone, so the bits do not depend on the thread count.
namespace {

CBLAS_TRANSPOSE trans(int32_t t) { return t ? CblasTrans : CblasNoTrans; }


// A product of at least 2 * kBlockMacs multiply-adds is cut into up to max_blocks()
// blocks of at least kBlockMacs each (whole multiples of kGranule rows or columns): two
// per core of the machine, at most 16. Each block repacks the other factor, so blocks
// cost time on one thread: the MLP's 100 x 256 x 784 product took 494 us in 16 blocks,
// 430 us in 4 and 404 us whole (OpenBLAS, one thread). (Not the thread count in force:
// the blocks, and so the bits, must not depend on it.)
using reel::blas::kBlockMacs;
constexpr int64_t kGranule = 16;
int64_t max_blocks() { return std::clamp<int64_t>(2 * int64_t{reel::parallel::cores()}, 2, 16); }

// The block size along a dimension of `extent` for a product of `macs` multiply-adds:
// `extent` itself when it is not worth cutting.
int64_t block_of(int64_t extent, double macs) {
  const auto blocks = static_cast<int64_t>(std::min<double>(static_cast<double>(max_blocks()), macs / kBlockMacs));
  if (blocks < 2 || extent < 2 * kGranule) return extent;
  const int64_t size = ((extent + blocks - 1) / blocks + kGranule - 1) / kGranule * kGranule;
  return std::min(size, extent);
}

// A small transposed B (at most kSmallB elements) times a tall A (at least 4 n rows) is
// transposed first, into this thread's scratch: OpenBLAS ran A B^T 1.7 to 2.4 times
// slower than A B for B of 10 x 10 to 20 x 20 and A of 1000 rows (gmm's Q (x - mu)),
// and the transpose costs n k copies against m n k multiply-adds.
constexpr int64_t kSmallB = 64 * 64;

template <class T>
void gemm_call(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k, const T* a,
               int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, T beta) {
  if (trans_b && n * k <= kSmallB && m >= 4 * n) {
    thread_local std::vector<T> bt;
    bt.resize(static_cast<std::size_t>(n * k));
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) bt[static_cast<std::size_t>(i * n + j)] = b[j * ldb + i];
    b = bt.data(), ldb = n, trans_b = 0;
  }
  if constexpr (sizeof(T) == 8)
    cblas_dgemm(CblasRowMajor, trans(trans_a), trans(trans_b), m, n, k, 1.0, a, lda, b, ldb, beta,
                c, ldc);
  else
    cblas_sgemm(CblasRowMajor, trans(trans_a), trans(trans_b), m, n, k, 1.0f, a, lda, b, ldb,
                beta, c, ldc);
}

// C = op(A) op(B) (+ beta C): cut along the longer of C's dimensions into blocks (rows
// of op(A), or columns of op(B)), each on the pool.
template <class T>
void gemm(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k, const T* a,
          int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, T beta = T(0)) {
  if (m == 0 || n == 0) return;
  const reel::detail::ExitGate gate;
  (void)reel::num_threads();  // the pool set up (OpenBLAS on one thread) before any product
  if (k == 0) {
    if (beta == T(0))
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
  const double macs = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (m >= n) {
    const int64_t rows = block_of(m, macs);
    reel::parallel::for_chunks((m + rows - 1) / rows, [&](int64_t blk) {
      const int64_t r0 = blk * rows, r = std::min(rows, m - r0);
      gemm_call(trans_a, trans_b, r, n, k, a + (trans_a ? r0 : r0 * lda), lda, b, ldb, c + r0 * ldc, ldc, beta);
    });
  } else {
    const int64_t cols = block_of(n, macs);
    reel::parallel::for_chunks((n + cols - 1) / cols, [&](int64_t blk) {
      const int64_t c0 = blk * cols, w = std::min(cols, n - c0);
      gemm_call(trans_a, trans_b, m, w, k, a, lda, b + (trans_b ? c0 * ldb : c0), ldb, c + c0, ldc, beta);
    });
  }
}

// One CBLAS gemv: y = op(A) x, A row-major [rows, cols] with leading dimension lda.
template <class T>
void gemv_call(bool trans_a, int64_t rows, int64_t cols, const T* a, int64_t lda, const T* x, T* y) {
  if constexpr (sizeof(T) == 8)
    cblas_dgemv(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, rows, cols, 1.0, a, lda, x, 1, 0.0, y, 1);
  else
    cblas_sgemv(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, rows, cols, 1.0f, a, lda, x, 1, 0.0f, y, 1);
}

// y = op(A) x, cut into blocks of A's rows on the pool: without trans_a each block is a
// block of y; with it (y = A^T x) each block's product is a partial y, and the partials
// are added in block order. (Blocks of A's columns, for A^T x, read every row of A once
// per block: llsq's [16392, 128] gradient took 889 us instead of 399 us.)
template <class T>
void gemv(int32_t trans_a, int64_t rows, int64_t cols, const T* a, const T* x, T* y) {
  if (rows == 0 || cols == 0) {
    std::fill(y, y + (trans_a ? cols : rows), T(0));
    return;
  }
  const reel::detail::ExitGate gate;
  (void)reel::num_threads();  // (as gemm)
  const int64_t block = block_of(rows, static_cast<double>(rows) * static_cast<double>(cols));
  const int64_t blocks = (rows + block - 1) / block;
  if (!trans_a) {
    reel::parallel::for_chunks(blocks, [&](int64_t blk) {
      const int64_t r0 = blk * block, len = std::min(block, rows - r0);
      gemv_call<T>(false, len, cols, a + r0 * cols, cols, x, y + r0);
    });
    return;
  }
  if (blocks == 1) return gemv_call<T>(true, rows, cols, a, cols, x, y);
  std::vector<T> partial(static_cast<std::size_t>((blocks - 1) * cols));
  reel::parallel::for_chunks(blocks, [&](int64_t blk) {
    const int64_t r0 = blk * block, len = std::min(block, rows - r0);
    T* out = blk == 0 ? y : partial.data() + (blk - 1) * cols;
    gemv_call<T>(true, len, cols, a + r0 * cols, cols, x + r0, out);
  });
  for (int64_t b = 1; b < blocks; ++b) {
    const T* p = partial.data() + (b - 1) * cols;
    for (int64_t j = 0; j < cols; ++j) y[j] += p[j];
  }
}

}  // namespace

extern "C" {

void reel_rt_gemm_f64(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                      const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
                      int64_t ldc) {
  gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
}

void reel_rt_gemm_f32(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                      int64_t ldc) {
  gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
}

void reel_rt_gemv_f64(int32_t trans_a, int64_t rows, int64_t cols, const double* a,
                      const double* x, double* y) {
  gemv(trans_a, rows, cols, a, x, y);
}

void reel_rt_gemv_f32(int32_t trans_a, int64_t rows, int64_t cols, const float* a,
                      const float* x, float* y) {
  gemv(trans_a, rows, cols, a, x, y);
}

}  // extern "C"

namespace reel::blas {

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
          int64_t ldb, T* c, int64_t ldc, T beta) {
  ::gemm(trans_a ? 1 : 0, trans_b ? 1 : 0, m, n, k, a, lda, b, ldb, c, ldc, beta);
}
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t,
                           double*, int64_t, double);
template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                          float*, int64_t, float);

}  // namespace reel::blas
