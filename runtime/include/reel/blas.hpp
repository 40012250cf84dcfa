#pragma once
// The runtime's CBLAS wrappers, with a C ABI so that JIT-compiled code can call them
// by name. Row-major; C = op(A) * op(B) (beta = 0), y = op(A) * x.
#include <cstdint>

extern "C" {
void reel_rt_gemm_f64(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                      const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
                      int64_t ldc);
void reel_rt_gemm_f32(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                      int64_t ldc);
// A is rows x cols as stored; with trans_a the product is A^T x.
void reel_rt_gemv_f64(int32_t trans_a, int64_t rows, int64_t cols, const double* a,
                      const double* x, double* y);
void reel_rt_gemv_f32(int32_t trans_a, int64_t rows, int64_t cols, const float* a,
                      const float* x, float* y);
}

namespace reel::blas {
// A product (gemm, gemv) of at least 2 * kBlockMacs multiply-adds is cut into blocks of
// at least kBlockMacs each, run on Reel's thread pool (runtime/src/blas.cpp); a smaller
// one is one CBLAS call on one thread.
constexpr double kBlockMacs = 1 << 18;

// C = op(A) op(B) + beta C (row-major), for double and float; for C++ kernels.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
          int64_t ldb, T* c, int64_t ldc, T beta);
}  // namespace reel::blas
