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
  static const auto f = reel::jit(kmeans_cost, kJitOptions);
  auto P = std::make_shared<Tensor>(input_tensor(input, "points"));
  auto C = std::make_shared<Tensor>(input_tensor(input, "centroids"));
  return each_run([=] { return f(*P, *C); }, scalar_json);
}

// The tape of J = d cost / dC and H's diagonal: forward over reverse with the points held
// constant (nodiff: no gradient for them, and no tangent flows from them), keeping only
// dC and its tangent along C's tangent. The Hessian with respect to C is diagonal, so H
// times ones is its diagonal: with the argmin mask constant, that is one pass that adds
// 2 x each centroid's count to the gradient's matmul (no other product).
reel::Tape kmeans_dir_tape(const Tensor& P, const Tensor& C) {
  const reel::Tape g =
      reel::grad_tape(reel::trace([](const Tensor& p, const Tensor& c) { return kmeans_cost(reel::nodiff(p), c); }, P, C));
  // g: P, C -> value, dP, dC; only dC kept.
  reel::TapeBuilder b;
  const reel::Var p = b.input(g.type(g.inputs()[0])), c = b.input(g.type(g.inputs()[1]));
  const std::vector<reel::Var> ins{p, c};
  b.set_outputs({b.inline_tape(g, ins).at(2)});
  // P, C, their tangents -> dC, its tangent; P's tangent ones, C's ones.
  const reel::Tape j = reel::jvp_tape(reel::cleanup(b.finish()));
  reel::TapeBuilder d;
  const reel::Var dp = d.input(j.type(j.inputs()[0])), dc = d.input(j.type(j.inputs()[1]));
  const std::vector<reel::Var> jins{dp, dc, d.broadcast_to(d.scalar(0.0, P.dtype()), P.shape()),
                                    d.broadcast_to(d.scalar(1.0, C.dtype()), C.shape())};
  const std::vector<reel::Var> r = d.inline_tape(j, jins);
  d.set_outputs({d.div(r.at(0), r.at(1))});
  return reel::cleanup(d.finish());
}

// Newton's direction J H^-1, one compiled pass.
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
    if (is_new) it->second = reel::compile(kmeans_dir_tape(*P, *C), kJitOptions.compile);
    fn = it->second;
  }
  auto args = std::make_shared<std::vector<Tensor>>(std::vector<Tensor>{*P, *C});
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = fn(*args).at(0); }, [=] { return matrix_json(*out); }};
}

}  // namespace

Functions kmeans_functions() { return {{"cost", kmeans_cost_fn}, {"dir", kmeans_dir}}; }

}  // namespace gradbench::evals
