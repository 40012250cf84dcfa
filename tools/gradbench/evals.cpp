// The GradBench evals with Reel's public API: each objective is ordinary Reel code,
// traced once per signature, differentiated by Reel and compiled (the cached
// reel::jit / reel::simplegrad(f), or tapes compiled here for nested derivatives).
#include <fmt/format.h>
#include <reel/reel.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>

#include "session.hpp"

namespace gradbench {

namespace {

using reel::Tensor;

// ---- JSON <-> tensors ---------------------------------------------------------------

const json& field(const json& input, const char* name) {
  if (!input.is_object() || !input.contains(name))
    throw reel::Error(fmt::format("evaluate: the input has no field {}", name));
  return input.at(name);
}

int64_t integer(const json& input, const char* name) {
  const json& v = field(input, name);
  if (!v.is_number()) throw reel::Error(fmt::format("evaluate: expected {} to be a number, got {}", name, v.dump()));
  return v.get<int64_t>();
}

double number(const json& input, const char* name) {
  const json& v = field(input, name);
  if (!v.is_number()) throw reel::Error(fmt::format("evaluate: expected {} to be a number, got {}", name, v.dump()));
  return v.get<double>();
}

// A JSON array of numbers, or of equally long arrays of numbers, as an f64 tensor.
Tensor tensor_of(const json& v, const char* name) {
  if (!v.is_array()) throw reel::Error(fmt::format("evaluate: expected {} to be an array", name));
  std::vector<double> values;
  if (v.empty() || !v.front().is_array()) {
    values.reserve(v.size());
    for (const json& e : v) {
      if (!e.is_number()) throw reel::Error(fmt::format("evaluate: expected {} to hold numbers", name));
      values.push_back(e.get<double>());
    }
    return reel::tensor(values, {static_cast<int64_t>(values.size())});
  }
  const std::size_t cols = v.front().size();
  values.reserve(v.size() * cols);
  for (const json& row : v) {
    if (!row.is_array() || row.size() != cols)
      throw reel::Error(fmt::format("evaluate: expected {} to be a matrix with rows of {} numbers", name, cols));
    for (const json& e : row) {
      if (!e.is_number()) throw reel::Error(fmt::format("evaluate: expected {} to hold numbers", name));
      values.push_back(e.get<double>());
    }
  }
  return reel::tensor(values, {static_cast<int64_t>(v.size()), static_cast<int64_t>(cols)});
}
Tensor tensor_of(const json& input, const char* name, int) { return tensor_of(field(input, name), name); }

json vector_json(const Tensor& t) { return t.values(); }
json matrix_json(const Tensor& t) {
  const auto v = t.values();
  const int64_t rows = t.shape().at(0), cols = t.numel() / std::max<int64_t>(rows, 1);
  json out = json::array();
  for (int64_t r = 0; r < rows; ++r)
    out.push_back(std::vector<double>(v.begin() + r * cols, v.begin() + (r + 1) * cols));
  return out;
}

// ---- lse ------------------------------------------------------------------------------

Tensor lse(const Tensor& x) { return reel::logsumexp(x); }

Prepared lse_primal(const json& input) {
  static const auto f = reel::jit(lse, {.compile_after = 1});
  auto x = std::make_shared<Tensor>(tensor_of(input, "x", 0));
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = f(*x); }, [=] { return json(out->item()); }};
}

Prepared lse_gradient(const json& input) {
  static const auto g = reel::simplegrad(lse, {.compile_after = 1});
  auto x = std::make_shared<Tensor>(tensor_of(input, "x", 0));
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = g(*x)[1]; }, [=] { return vector_json(*out); }};
}

// ---- llsq -----------------------------------------------------------------------------

// t_i = -1 + 2i/(n-1), s_i = sign(t_i); 1/2 sum_i (s_i - sum_j x_j t_i^j)^2. The powers
// of t depend on n alone: constants of the trace for each n.
Tensor llsq(const Tensor& x, int64_t n) {
  const int64_t m = x.shape().at(0);
  std::vector<double> t(static_cast<std::size_t>(n)), s(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    t[static_cast<std::size_t>(i)] = n == 1 ? -1.0 : -1.0 + static_cast<double>(i) * 2.0 / static_cast<double>(n - 1);
    const double ti = t[static_cast<std::size_t>(i)];
    s[static_cast<std::size_t>(i)] = ti > 0 ? 1.0 : ti < 0 ? -1.0 : 0.0;
  }
  std::vector<double> powers(static_cast<std::size_t>(n * m));
  for (int64_t i = 0; i < n; ++i) {
    double p = 1;
    for (int64_t j = 0; j < m; ++j, p *= t[static_cast<std::size_t>(i)]) powers[static_cast<std::size_t>(i * m + j)] = p;
  }
  const Tensor V = reel::tensor(powers, {n, m}), S = reel::tensor(s, {n});
  return 0.5 * reel::sum(reel::square(S - reel::matmul(V, x)));
}

Prepared llsq_primal(const json& input) {
  static const auto f = reel::jit(llsq, {.compile_after = 1});
  auto x = std::make_shared<Tensor>(tensor_of(input, "x", 0));
  const int64_t n = integer(input, "n");
  if (n < 1) throw reel::Error(fmt::format("llsq: expected n >= 1, got {}", n));
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = f(*x, n); }, [=] { return json(out->item()); }};
}

Prepared llsq_gradient(const json& input) {
  static const auto g = reel::simplegrad(llsq, {.compile_after = 1});
  auto x = std::make_shared<Tensor>(tensor_of(input, "x", 0));
  const int64_t n = integer(input, "n");
  if (n < 1) throw reel::Error(fmt::format("llsq: expected n >= 1, got {}", n));
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = g(*x, n)[1]; }, [=] { return vector_json(*out); }};
}

// ---- ode ------------------------------------------------------------------------------

// s classic RK4 steps of y' = f(y), f(y)_0 = x_0, f(y)_i = x_i y_{i-1}, from y = 0, h = 2/s.
Tensor ode(const Tensor& x, int64_t s) {
  const int64_t n = x.shape().at(0);
  const double h = 2.0 / static_cast<double>(s);
  const Tensor x0 = reel::slice(x, 0, 1), rest = reel::slice(x, 1, n);
  auto f = [&](const Tensor& y) { return reel::concat({x0, rest * reel::slice(y, 0, n - 1)}); };
  Tensor y = reel::zeros({n});
  for (int64_t step = 0; step < s; ++step) {
    const Tensor k1 = f(y);
    const Tensor k2 = f(y + (h / 2) * k1);
    const Tensor k3 = f(y + (h / 2) * k2);
    const Tensor k4 = f(y + h * k3);
    y = y + (h / 6) * (k1 + 2.0 * k2 + 2.0 * k3 + k4);
  }
  return y;
}
Tensor ode_last(const Tensor& x, int64_t s) { return reel::index(ode(x, s), -1); }

int64_t ode_steps(const json& input) {
  const int64_t s = integer(input, "s");
  if (s < 1) throw reel::Error(fmt::format("ode: expected s >= 1, got {}", s));
  return s;
}

Prepared ode_primal(const json& input) {
  static const auto f = reel::jit(ode, {.compile_after = 1});
  auto x = std::make_shared<Tensor>(tensor_of(input, "x", 0));
  if (x->numel() < 2) throw reel::Error("ode: expected at least 2 values of x");
  const int64_t s = ode_steps(input);
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = f(*x, s); }, [=] { return vector_json(*out); }};
}

Prepared ode_gradient(const json& input) {
  static const auto g = reel::simplegrad(ode_last, {.compile_after = 1});
  auto x = std::make_shared<Tensor>(tensor_of(input, "x", 0));
  if (x->numel() < 2) throw reel::Error("ode: expected at least 2 values of x");
  const int64_t s = ode_steps(input);
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = g(*x, s)[1]; }, [=] { return vector_json(*out); }};
}

// ---- kmeans ---------------------------------------------------------------------------

// sum_i min_j |P_i - C_j|^2, with the squared distances |P|^2 - 2 P C^T + |C|^2.
Tensor kmeans_cost(const Tensor& P, const Tensor& C) {
  const Tensor d2 = reel::sum(reel::square(P), 1, true) - 2.0 * reel::matmul(P, reel::transpose(C)) +
                    reel::sum(reel::square(C), 1);
  return reel::sum(reel::min(d2, 1));
}

Prepared kmeans_cost_fn(const json& input) {
  static const auto f = reel::jit(kmeans_cost, {.compile_after = 1});
  auto P = std::make_shared<Tensor>(tensor_of(input, "points", 0));
  auto C = std::make_shared<Tensor>(tensor_of(input, "centroids", 0));
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = f(*P, *C); }, [=] { return json(out->item()); }};
}

// J H^-1 with J = d cost / dC and H's diagonal from forward over reverse: the Hessian
// with respect to C is diagonal, so H times a vector of ones is its diagonal.
Prepared kmeans_dir(const json& input) {
  static std::mutex mutex;
  static std::map<std::pair<reel::Shape, reel::Shape>, reel::CompiledFunction> compiled;
  auto P = std::make_shared<Tensor>(tensor_of(input, "points", 0));
  auto C = std::make_shared<Tensor>(tensor_of(input, "centroids", 0));
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

const std::map<std::string, std::map<std::string, Maker>>& modules() {
  static const std::map<std::string, std::map<std::string, Maker>> m{
      {"hello", {{"square", [](const json& input) {
                    const double x = input.get<double>();
                    auto out = std::make_shared<double>();
                    return Prepared{[=] { *out = x * x; }, [=] { return json(*out); }};
                  }},
                 {"double", [](const json& input) {
                    const double x = input.get<double>();
                    auto out = std::make_shared<double>();
                    return Prepared{[=] { *out = 2 * x; }, [=] { return json(*out); }};
                  }}}},
      {"lse", {{"primal", lse_primal}, {"gradient", lse_gradient}}},
      {"llsq", {{"primal", llsq_primal}, {"gradient", llsq_gradient}}},
      {"ode", {{"primal", ode_primal}, {"gradient", ode_gradient}}},
      {"kmeans", {{"cost", kmeans_cost_fn}, {"dir", kmeans_dir}}},
  };
  return m;
}

}  // namespace gradbench
