#include "reel/blas.hpp"

#include <cblas.h>

#include <algorithm>

namespace {

CBLAS_TRANSPOSE trans(int32_t t) { return t ? CblasTrans : CblasNoTrans; }

// CBLAS rejects empty inner dimensions; an empty sum is zero.
template <class T>
void gemm(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k, const T* a,
          int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, T beta = T(0)) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == T(0))
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
  if constexpr (sizeof(T) == 8)
    cblas_dgemm(CblasRowMajor, trans(trans_a), trans(trans_b), m, n, k, 1.0, a, lda, b, ldb, beta,
                c, ldc);
  else
    cblas_sgemm(CblasRowMajor, trans(trans_a), trans(trans_b), m, n, k, 1.0f, a, lda, b, ldb,
                beta, c, ldc);
}

template <class T>
void gemv(int32_t trans_a, int64_t rows, int64_t cols, const T* a, const T* x, T* y) {
  if (rows == 0 || cols == 0) {
    std::fill(y, y + (trans_a ? cols : rows), T(0));
    return;
  }
  if constexpr (sizeof(T) == 8)
    cblas_dgemv(CblasRowMajor, trans(trans_a), rows, cols, 1.0, a, cols, x, 1, 0.0, y, 1);
  else
    cblas_sgemv(CblasRowMajor, trans(trans_a), rows, cols, 1.0f, a, cols, x, 1, 0.0f, y, 1);
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
