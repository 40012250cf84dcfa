// GradBench's gmm: the GMM log posterior and its gradient.
#include "evals.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <tuple>
#include <vector>

namespace gradbench::evals {

namespace {

// GradBench's GMM log posterior (specs/adbench-objectives.md): Q_k from q_k (exp on the
// diagonal) and l_k (the strict lower part, column by column).
Tensor gmm(const Tensor& alpha, const Tensor& mu, const Tensor& q, const Tensor& l, const Tensor& data, double gamma,
           int64_t m) {
  const Tensor x = reel::nodiff(data);  // data: no gradient wanted
  const int64_t n = x.shape().at(0), d = x.shape().at(1), k = alpha.shape().at(0);
  std::vector<double> eye(static_cast<std::size_t>(d * d), 0.0);
  for (int64_t i = 0; i < d; ++i) eye[static_cast<std::size_t>(i * d + i)] = 1.0;
  const Tensor I = reel::tensor(eye, {d, d});
  std::vector<Tensor> Qs;
  for (int64_t j = 0; j < k; ++j)
    Qs.push_back(I * reel::exp(reel::index(q, j)) + reel::tril_from_vector(reel::index(l, j), d, -1, true));
  const Tensor Q = reel::stack(Qs);                                              // [k, d, d]
  const Tensor centred = reel::expand_dims(x, 0) - reel::expand_dims(mu, 1);    // [k, n, d]
  const Tensor Qx = reel::matmul(centred, reel::transpose(Q));                   // [k, n, d]
  const Tensor beta = reel::expand_dims(alpha + reel::sum(q, 1), 1) - 0.5 * reel::sum(reel::square(Qx), 2);  // [k, n]
  const double pi = std::numbers::pi, nd = static_cast<double>(n), dd = static_cast<double>(d);
  const double nw = dd + static_cast<double>(m) + 1;
  double lgamma_d = dd * (dd - 1) / 4 * std::log(pi);
  for (int64_t j = 1; j <= d; ++j) lgamma_d += std::lgamma(nw / 2 + (1 - static_cast<double>(j)) / 2);
  const double C = nw * dd * (std::log(gamma) - 0.5 * std::log(2.0)) - lgamma_d;
  const Tensor wishart = reel::sum(0.5 * gamma * gamma * (reel::sum(reel::exp(2.0 * q)) + reel::sum(reel::square(l)))) -
                         static_cast<double>(m) * reel::sum(q);
  return -(nd * dd / 2) * std::log(2 * pi) + reel::sum(reel::logsumexp(beta, 0)) - nd * reel::logsumexp(alpha) - wishart +
         static_cast<double>(k) * C;
}

}  // namespace

std::shared_ptr<GmmInput> gmm_input(const json& input) {
  auto g = std::make_shared<GmmInput>();
  g->alpha = input_tensor(input, "alpha");
  g->mu = input_tensor(input, "mu");
  g->q = input_tensor(input, "q");
  g->l = input_tensor(input, "l");
  g->x = input_tensor(input, "x");
  g->gamma = number(input, "gamma");
  g->m = integer(input, "gmm", "m", std::numeric_limits<int64_t>::min());
  const int64_t k = g->alpha.numel();
  if (g->x.rank() != 2 || g->mu.rank() != 2 || g->q.rank() != 2 || g->mu.shape() != reel::Shape{k, g->x.shape()[1]} ||
      g->q.shape() != g->mu.shape())
    throw reel::Error("gmm: expected alpha [k], mu and q [k][d], x [n][d]");
  const int64_t d = g->x.shape()[1];
  // The sizes given must be those of the arrays.
  for (const auto& [name, size, of] : {std::tuple{"d", d, "the length of x's rows"}, std::tuple{"k", k, "the length of alpha"},
                                       std::tuple{"n", g->x.shape()[0], "the number of x's rows"}})
    if (const int64_t given = integer(input, "gmm", name, 1); given != size)
      throw reel::Error(fmt::format("gmm: \"{}\" is {} but {} is {}", name, given, of, size));
  if (g->l.rank() != 2) g->l = reel::reshape(g->l, {k, 0});  // d = 1: no strict lower part
  if (g->l.shape() != reel::Shape{k, d * (d - 1) / 2}) throw reel::Error("gmm: expected l [k][d(d-1)/2]");
  return g;
}

json gmm_jacobian_json(const Tensor& alpha, const Tensor& mu, const Tensor& q, const Tensor& l) {
  return json{{"alpha", vector_json(alpha)}, {"mu", matrix_json(mu)}, {"q", matrix_json(q)}, {"l", matrix_json(l)}};
}

namespace {

Prepared gmm_objective(const json& input) {
  static const auto f = reel::jit(gmm, kJitOptions);
  auto g = gmm_input(input);
  return each_run([=] { return f(g->alpha, g->mu, g->q, g->l, g->x, g->gamma, g->m); }, scalar_json);
}

Prepared gmm_jacobian(const json& input) {
  static const auto grad = reel::simplegrad(gmm, kJitOptions);
  auto g = gmm_input(input);
  auto out = std::make_shared<std::array<Tensor, 8>>();
  return {[=] { *out = grad(g->alpha, g->mu, g->q, g->l, g->x, g->gamma, g->m); },
          [=] { return gmm_jacobian_json((*out)[1], (*out)[2], (*out)[3], (*out)[4]); }};
}

}  // namespace

Functions gmm_functions() { return {{"objective", gmm_objective}, {"jacobian", gmm_jacobian}}; }

}  // namespace gradbench::evals
