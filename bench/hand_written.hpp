#pragma once
// Gradients written by hand, as a careful C++ programmer would: plain loops over
// preallocated buffers, and the same CBLAS calls Reel's gradient tape makes.
#include <cstdint>
#include <vector>

namespace bench {

// L(x) = sum(sigmoid(x)); returns L, writes dL/dx.
template <class T>
T sigmoid_sum_grad(const T* x, T* dx, int64_t n);

// loss(W, b, x) = sum(W x + b), W [m,k], b [m,1], x [k,n].
struct LinearBuffers {
  std::vector<double> y, ones, dW, db, dx;
  LinearBuffers(int64_t m, int64_t k, int64_t n);
};
double linear_sum_grad(const double* W, const double* b, const double* x, int64_t m, int64_t k,
                       int64_t n, LinearBuffers& buf);

// loss = sum(square(W2 tanh(W1 x + b1) + b2 - y)), W1 [h,k], b1 [h,1], W2 [o,h], b2 [o,1],
// x [k,n] and y [o,n] fixed; gradients for W1, b1, W2, b2.
template <class T>
struct MlpBuffers {
  std::vector<T> z, dout, hid, dhid, dW1, db1, dW2, db2;
  MlpBuffers(int64_t h, int64_t k, int64_t o, int64_t n);
};
template <class T>
T mlp_grad(const T* W1, const T* b1, const T* W2, const T* b2, const T* x, const T* y, int64_t h,
           int64_t k, int64_t o, int64_t n, MlpBuffers<T>& buf);

}  // namespace bench

namespace bench {

// Softmax cross-entropy, loss = -sum(y * log_softmax(z, rows)) / rows for z, y
// [rows, cols]; writes dz = (softmax(z) - y) / rows (max-shifted, two passes a row).
float softmax_xent_grad(const float* z, const float* y, int64_t rows, int64_t cols, float* dz);

// logsumexp of n numbers (max-shifted); writes its gradient exp(x - lse).
double logsumexp_grad(const double* x, int64_t n, double* dx);

// A conv2d layer, 3x3 kernels, stride 1, padding 1, f32: loss = sum(conv2d(x, w) * r)
// for x [N,C,H,W], w [O,C,3,3], r [N,O,H,W]; gradients dx and dw, by im2col and gemm
// per image, col2im for dx.
struct ConvBuffers {
  std::vector<float> cols, y, dcols, dx, dw;
  ConvBuffers(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o);
};
float conv_layer_grad(const float* x, const float* w, const float* r, int64_t n, int64_t c, int64_t h, int64_t wd,
                      int64_t o, ConvBuffers& buf);

}  // namespace bench

namespace bench {
// The same conv2d layer gradient with direct loops (no im2col, no BLAS), to measure
// the choice of im2col + CBLAS. Writes dx and dw into buf.
float conv_layer_grad_direct(const float* x, const float* w, const float* r, int64_t n, int64_t c, int64_t h,
                             int64_t wd, int64_t o, ConvBuffers& buf);
}  // namespace bench
