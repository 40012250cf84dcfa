#include "hand_written.hpp"

#include <cblas.h>

#include <algorithm>
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

namespace bench {

float softmax_xent_grad(const float* z, const float* y, int64_t rows, int64_t cols, float* dz) {
  double loss = 0;
  const float inv = 1.0f / static_cast<float>(rows);
  for (int64_t i = 0; i < rows; ++i) {
    const float* zi = z + i * cols;
    const float* yi = y + i * cols;
    float m = zi[0];
    for (int64_t j = 1; j < cols; ++j) m = zi[j] > m ? zi[j] : m;
    double s = 0;
    for (int64_t j = 0; j < cols; ++j) s += std::exp(zi[j] - m);
    const float lse = m + static_cast<float>(std::log(s));
    const float inv_s = static_cast<float>(1.0 / s);
    double row = 0;
    for (int64_t j = 0; j < cols; ++j) {
      row += yi[j] * (zi[j] - lse);
      dz[i * cols + j] = (std::exp(zi[j] - m) * inv_s - yi[j]) * inv;
    }
    loss -= row;
  }
  return static_cast<float>(loss / static_cast<double>(rows));
}

double logsumexp_grad(const double* x, int64_t n, double* dx) {
  double m = x[0];
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  const double lse = m + std::log(s);
  for (int64_t i = 0; i < n; ++i) dx[i] = std::exp(x[i] - lse);
  return lse;
}

ConvBuffers::ConvBuffers(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o)
    : cols(static_cast<std::size_t>(c * 9 * h * w)),
      y(static_cast<std::size_t>(n * o * h * w)),
      dcols(static_cast<std::size_t>(c * 9 * h * w)),
      dx(static_cast<std::size_t>(n * c * h * w)),
      dw(static_cast<std::size_t>(o * c * 9)) {}

namespace {
// 3x3, stride 1, padding 1: the output is h x w.
void im2col3(const float* img, int64_t c, int64_t h, int64_t w, float* cols) {
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        float* row = cols + ((ch * 3 + i) * 3 + j) * h * w;
        for (int64_t y = 0; y < h; ++y) {
          const int64_t iy = y + i - 1;
          for (int64_t x = 0; x < w; ++x) {
            const int64_t ix = x + j - 1;
            row[y * w + x] = iy >= 0 && iy < h && ix >= 0 && ix < w ? img[(ch * h + iy) * w + ix] : 0.0f;
          }
        }
      }
}
void col2im3(const float* cols, int64_t c, int64_t h, int64_t w, float* img) {
  std::fill(img, img + c * h * w, 0.0f);
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        const float* row = cols + ((ch * 3 + i) * 3 + j) * h * w;
        for (int64_t y = 0; y < h; ++y) {
          const int64_t iy = y + i - 1;
          if (iy < 0 || iy >= h) continue;
          for (int64_t x = 0; x < w; ++x) {
            const int64_t ix = x + j - 1;
            if (ix >= 0 && ix < w) img[(ch * h + iy) * w + ix] += row[y * w + x];
          }
        }
      }
}
}  // namespace

float conv_layer_grad(const float* x, const float* w, const float* r, int64_t n, int64_t c, int64_t h, int64_t wd,
                      int64_t o, ConvBuffers& buf) {
  const int64_t k = c * 9, p = h * wd;
  double loss = 0;
  std::fill(buf.dw.begin(), buf.dw.end(), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    im2col3(x + i * c * p, c, h, wd, buf.cols.data());
    float* y = buf.y.data() + i * o * p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, o, p, k, 1.0f, w, k, buf.cols.data(), p, 0.0f, y, p);
    const float* ri = r + i * o * p;
    for (int64_t j = 0; j < o * p; ++j) loss += static_cast<double>(y[j]) * ri[j];
    // dy = r: dw += r cols^T, dcols = w^T r, dx = col2im(dcols).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, o, k, p, 1.0f, ri, p, buf.cols.data(), p, 1.0f,
                buf.dw.data(), k);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, p, o, 1.0f, w, k, ri, p, 0.0f, buf.dcols.data(), p);
    col2im3(buf.dcols.data(), c, h, wd, buf.dx.data() + i * c * p);
  }
  return static_cast<float>(loss);
}

}  // namespace bench

namespace bench {

float conv_layer_grad_direct(const float* x, const float* w, const float* r, int64_t n, int64_t c, int64_t h,
                             int64_t wd, int64_t o, ConvBuffers& buf) {
  double loss = 0;
  std::fill(buf.dx.begin(), buf.dx.end(), 0.0f);
  std::fill(buf.dw.begin(), buf.dw.end(), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t xx = 0; xx < wd; ++xx) {
          const float g = r[((i * o + oc) * h + y) * wd + xx];  // dy = r
          float acc = 0;
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t u = 0; u < 3; ++u) {
              const int64_t iy = y + u - 1;
              if (iy < 0 || iy >= h) continue;
              for (int64_t v = 0; v < 3; ++v) {
                const int64_t ix = xx + v - 1;
                if (ix < 0 || ix >= wd) continue;
                const int64_t xi = ((i * c + ch) * h + iy) * wd + ix, wi = ((oc * c + ch) * 3 + u) * 3 + v;
                acc += x[xi] * w[wi];
                buf.dx[static_cast<std::size_t>(xi)] += g * w[wi];
                buf.dw[static_cast<std::size_t>(wi)] += g * x[xi];
              }
            }
          loss += static_cast<double>(acc) * g;
        }
  return static_cast<float>(loss);
}

}  // namespace bench
