#pragma once
// The operations users call on tensors. Each runs eagerly and, while a function is
// traced, records itself on the tape.
#include "reel/tensor.hpp"

namespace reel {

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
// A double operand becomes a 0-d constant of the tensor's dtype.
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor pow(const Tensor& x, double p);
// -1, 0 or 1 by the sign of each element; no gradient flows through it.
Tensor sign(const Tensor& x);
// |x|; its gradient is sign(x), so 0 at 0.
Tensor abs(const Tensor& x);
// The value of x, through which no gradient flows (Yota's @nodiff, JAX's
// stop_gradient). It shows on the tape as a call of `nodiff`.
Tensor nodiff(const Tensor& x);
inline Tensor stop_gradient(const Tensor& x) { return nodiff(x); }

Tensor sum(const Tensor& x);                // all elements, 0-d result
Tensor sum(const Tensor& x, int64_t axis);  // drops `axis` (negative counts from the end)
Tensor mean(const Tensor& x);               // all elements, 0-d result
Tensor sum_to(const Tensor& x, const Shape& shape);

Tensor matmul(const Tensor& a, const Tensor& b);  // [m,k]x[k,n] -> [m,n]; [m,k]x[k] -> [m]
Tensor transpose(const Tensor& x);                // 2-D
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor broadcast_to(const Tensor& x, const Shape& shape);

}  // namespace reel
