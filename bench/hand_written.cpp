#include "hand_written.hpp"

#include <cblas.h>

#include <cmath>

namespace bench {

template <class T>
T sigmoid_sum_grad(const T* x, T* dx, int64_t n) {
  T total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T s = T(1) / (T(1) + std::exp(-x[i]));
    total += s;
    dx[i] = s * (T(1) - s);
  }
  return total;
}
template double sigmoid_sum_grad(const double*, double*, int64_t);
template float sigmoid_sum_grad(const float*, float*, int64_t);

LinearBuffers::LinearBuffers(int64_t m, int64_t k, int64_t n)
    : y(m * n), ones(m * n, 1.0), dW(m * k), db(m), dx(k * n) {}

double linear_sum_grad(const double* W, const double* b, const double* x, int64_t m, int64_t k,
                       int64_t n, LinearBuffers& buf) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, W, k, x, n, 0.0,
              buf.y.data(), n);
  double total = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) total += buf.y[i * n + j] + b[i];
  // d/dy = ones: dW = ones x^T, dx = W^T ones, db = row sums of ones.
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, k, n, 1.0, buf.ones.data(), n, x, n,
              0.0, buf.dW.data(), k);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, n, m, 1.0, W, k, buf.ones.data(), n,
              0.0, buf.dx.data(), n);
  for (int64_t i = 0; i < m; ++i) buf.db[i] = static_cast<double>(n);
  return total;
}

template <class T>
MlpBuffers<T>::MlpBuffers(int64_t h, int64_t k, int64_t o, int64_t n)
    : z(h * n), dout(o * n), hid(h * n), dhid(h * n), dW1(h * k), db1(h), dW2(o * h), db2(o) {}

template <class T>
static void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                 const T* b, int64_t ldb, T* c, int64_t ldc) {
  const auto TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  if constexpr (sizeof(T) == 8)
    cblas_dgemm(CblasRowMajor, TA, TB, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
  else
    cblas_sgemm(CblasRowMajor, TA, TB, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

template <class T>
T mlp_grad(const T* W1, const T* b1, const T* W2, const T* b2, const T* x, const T* y, int64_t h,
           int64_t k, int64_t o, int64_t n, MlpBuffers<T>& buf) {
  gemm<T>(false, false, h, n, k, W1, k, x, n, buf.z.data(), n);  // z = W1 x
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < n; ++j) buf.hid[i * n + j] = std::tanh(buf.z[i * n + j] + b1[i]);
  gemm<T>(false, false, o, n, h, W2, h, buf.hid.data(), n, buf.dout.data(), n);  // W2 hid
  T total = 0;
  for (int64_t i = 0; i < o; ++i) {
    T row = 0;
    for (int64_t j = 0; j < n; ++j) {
      const T d = buf.dout[i * n + j] + b2[i] - y[i * n + j];
      total += d * d;
      buf.dout[i * n + j] = 2 * d;  // d loss / d out
      row += 2 * d;
    }
    buf.db2[i] = row;
  }
  gemm<T>(false, true, o, h, n, buf.dout.data(), n, buf.hid.data(), n, buf.dW2.data(), h);
  gemm<T>(true, false, h, n, o, W2, h, buf.dout.data(), n, buf.dhid.data(), n);
  for (int64_t i = 0; i < h; ++i) {
    T row = 0;
    for (int64_t j = 0; j < n; ++j) {
      const T t = buf.hid[i * n + j];
      const T dz = buf.dhid[i * n + j] * (1 - t * t);
      buf.dhid[i * n + j] = dz;
      row += dz;
    }
    buf.db1[i] = row;
  }
  gemm<T>(false, true, h, k, n, buf.dhid.data(), n, x, n, buf.dW1.data(), k);
  return total;
}

template struct MlpBuffers<double>;
template struct MlpBuffers<float>;
template double mlp_grad(const double*, const double*, const double*, const double*, const double*,
                         const double*, int64_t, int64_t, int64_t, int64_t, MlpBuffers<double>&);
template float mlp_grad(const float*, const float*, const float*, const float*, const float*,
                        const float*, int64_t, int64_t, int64_t, int64_t, MlpBuffers<float>&);

}  // namespace bench
