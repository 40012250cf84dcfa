#pragma once
// Tracker's back!: reel::back(y) differentiates y with respect to every param it was
// computed from (reel::param, reel/track.hpp) and adds the gradients to the params'
// accumulated ones (W.grad(); W.zero_grad() clears them).
//
//   Tensor W = reel::param(reel::tensor({1, 2, 3, 4}, {2, 2}));
//   Tensor x = reel::param(reel::tensor({5, 6}));
//   Tensor y = reel::matmul(W, x);            // [17, 39], recorded
//   reel::back(y, reel::tensor({1, -1}));     // W.grad() = [5 6; -5 -6], x.grad() = [-2, -2]
//
// back rebuilds the tape y came from (the recorded calls, params as its inputs,
// other tensors as constants), derives its vector-Jacobian product with the same
// rules as reel::grad and runs it in the interpreter. Calling it twice adds twice.
// Threads: several threads may compute from shared params and call back at once; each
// back adds its gradients under the params' locks, so the sums are exact. W.assign on
// another thread is safe too: operations read each param at one version, and back of a
// y computed before the assign (or while it ran) is a reel::Error.
#include "reel/track.hpp"

namespace reel {

// y must have one element (its seed is 1).
void back(const Tensor& y);
// Any y: the gradient is seed^T J (seed has y's dtype and shape).
void back(const Tensor& y, const Tensor& seed);

}  // namespace reel
