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
