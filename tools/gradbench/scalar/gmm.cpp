// GradBench's gmm by its own C++ (gradbench/evals/gmm.hpp, with ADBench's matrix helpers)
// with reel::Real: gmm::objective<Real>.
#include "scalar.hpp"

#include <memory>

#include "gradbench_prelude.hpp"
namespace {
#include "gradbench/evals/gmm.hpp"
}

namespace gradbench::scalar {

namespace {

// gmm::objective<Real> of the parameters' Reals (alpha [k], mu and q [k][d], l
// [k][d(d-1)/2], row by row). The data x are numbers in the template (const double*):
// they are given as numbers, which reel::jit keys its cache on, so a trace is reused
// only for the same data. Its logsumexp's max is std::max: no branch.
Real gmm_of(const std::vector<Real>& alpha, const std::vector<Real>& mu, const std::vector<Real>& q,
            const std::vector<Real>& l, const std::vector<double>& x, int64_t d, double gamma, int64_t m) {
  const int k = static_cast<int>(alpha.size()), n = static_cast<int>(x.size() / static_cast<std::size_t>(d));
  const ::Wishart wishart{gamma, static_cast<int>(m)};
  return reel::output([&](Real* err) {
    ::gmm::objective(static_cast<int>(d), k, n, alpha.data(), mu.data(), q.data(), l.data(), x.data(), wishart, err);
  });
}

// The input as gmm_of takes it: the parameters' tensors, the data's numbers.
struct GmmArgs {
  std::shared_ptr<evals::GmmInput> in;
  std::vector<double> x;
  int64_t d;
};
std::shared_ptr<const GmmArgs> gmm_args(const json& input) {
  auto in = evals::gmm_input(input);
  const int64_t d = in->x.shape()[1];
  return std::make_shared<const GmmArgs>(GmmArgs{in, in->x.values(), d});
}

Prepared gmm_objective(const json& input) {
  static const auto f = reel::jit(gmm_of, evals::kJitOptions);
  auto a = gmm_args(input);
  return evals::each_run([=] { return f(a->in->alpha, a->in->mu, a->in->q, a->in->l, a->x, a->d, a->in->gamma, a->in->m); },
                         real_json);
}

Prepared gmm_jacobian(const json& input) {
  static const auto grad = reel::simplegrad(gmm_of, evals::kJitOptions);
  auto a = gmm_args(input);
  auto out = std::make_shared<decltype(grad(a->in->alpha, a->in->mu, a->in->q, a->in->l, a->x, a->d, 0.0, int64_t{0}))>();
  return {[=] { *out = grad(a->in->alpha, a->in->mu, a->in->q, a->in->l, a->x, a->d, a->in->gamma, a->in->m); },
          [=] { return evals::gmm_jacobian_json((*out)[1], (*out)[2], (*out)[3], (*out)[4]); }};
}

// Per point and component: centring, Q's diagonal and strictly lower products, the
// squared norm (about d^2 + 3d), and the log-sum-exp over components.
int64_t gmm_operations(const json& input) {
  const int64_t n = evals::integer(input, "gmm", "n"), k = evals::integer(input, "gmm", "k"),
                d = evals::integer(input, "gmm", "d");
  return n * k * (d * d + 3 * d + 8);
}

}  // namespace

ScalarEval gmm_eval() { return {{{"objective", gmm_objective}, {"jacobian", gmm_jacobian}}, gmm_operations}; }

}  // namespace gradbench::scalar
