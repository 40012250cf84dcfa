// GradBench's kmeans: the k-means cost, and Newton's direction J H^-1 (forward over reverse).
#include "evals.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace gradbench::evals {

namespace {

// sum_i min_j |P_i - C_j|^2, with the squared distances |P|^2 - 2 P C^T + |C|^2.
Tensor kmeans_cost(const Tensor& P, const Tensor& C) {
  const Tensor d2 = reel::sum(reel::square(P), 1, true) - 2.0 * reel::matmul(P, reel::transpose(C)) +
                    reel::sum(reel::square(C), 1);
  // Each point's nearest centroid, ties to the lowest j (argmin's first minimum), as a
  // 0/1 mask through which no gradient flows.
  const int64_t k = C.shape().at(0);
  const Tensor nearest = reel::expand_dims(reel::cast(reel::argmin(d2, 1), d2.dtype()), 1) ==
                         reel::expand_dims(reel::arange(k, d2.dtype()), 0);
  return reel::sum(d2 * nearest);
}

Prepared kmeans_cost_fn(const json& input) {
  static const auto f = reel::jit(kmeans_cost, {.compile_after = 1});
  auto P = std::make_shared<Tensor>(input_tensor(input, "points"));
  auto C = std::make_shared<Tensor>(input_tensor(input, "centroids"));
  return each_run([=] { return f(*P, *C); }, scalar_json);
}

// J H^-1 with J = d cost / dC and H's diagonal from forward over reverse: the Hessian
// with respect to C is diagonal, so H times a vector of ones is its diagonal.
Prepared kmeans_dir(const json& input) {
  static std::mutex mutex;
  static std::map<std::pair<reel::Shape, reel::Shape>, reel::CompiledFunction> compiled;
  auto P = std::make_shared<Tensor>(input_tensor(input, "points"));
  auto C = std::make_shared<Tensor>(input_tensor(input, "centroids"));
  if (P->rank() != 2 || C->rank() != 2 || P->shape()[1] != C->shape()[1])
    throw reel::Error("kmeans: expected points [n][d] and centroids [k][d]");
  reel::CompiledFunction fn;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto [it, is_new] = compiled.try_emplace({P->shape(), C->shape()});
    if (is_new) {
      // Inputs of the tangent tape: P, C, then their tangents; outputs: value, dP, dC,
      // then the tangents of those.
      it->second = reel::compile(reel::jvp_tape(reel::grad_tape(reel::trace(kmeans_cost, *P, *C))));
    }
    fn = it->second;
  }
  auto tangents = std::make_shared<std::vector<Tensor>>(
      std::vector<Tensor>{*P, *C, reel::zeros(P->shape()), reel::ones(C->shape())});
  auto out = std::make_shared<Tensor>();
  return {[=] {
            const std::vector<Tensor> r = fn(*tangents);
            *out = r.at(2) / r.at(5);
          },
          [=] { return matrix_json(*out); }};
}

}  // namespace

Functions kmeans_functions() { return {{"cost", kmeans_cost_fn}, {"dir", kmeans_dir}}; }

}  // namespace gradbench::evals
