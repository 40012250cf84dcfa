// The GradBench evals with Reel's public API: each objective is ordinary Reel code,
// traced once per signature, differentiated by Reel and compiled (the cached
// reel::jit / reel::simplegrad(f), or tapes compiled here for nested derivatives).
#include <fmt/format.h>
#include <reel/reel.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <optional>
#include <string_view>

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

// Every integer of the input is read here: a JSON integer, or a number with no
// fractional part (2.0), within [lo, hi]; anything else (2.5, 1e30, a string, a
// number past int64) is an error quoting what was given, never truncated or wrapped.
// `what` names it for the message: "n", or "correspondences"[3].
int64_t integer_of(const json& v, std::string_view eval, const std::string& what, int64_t lo, int64_t hi,
                   std::string_view why_hi = "") {
  constexpr int64_t lowest = std::numeric_limits<int64_t>::min(), highest = std::numeric_limits<int64_t>::max();
  std::optional<int64_t> got;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() <= static_cast<uint64_t>(highest)) got = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    got = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    // (2^63 is the first double past int64; -2^63 is in it.)
    if (std::isfinite(d) && d == std::trunc(d) && d >= -0x1p63 && d < 0x1p63) got = static_cast<int64_t>(d);
  }
  if (got && *got >= lo && *got <= hi) return *got;
  const std::string expected = hi != highest  ? fmt::format("an integer from {} to {}{}", lo, hi, why_hi)
                               : lo == 0      ? std::string("a non-negative integer")
                               : lo == 1      ? std::string("a positive integer")
                               : lo == lowest ? std::string("an integer")
                                              : fmt::format("an integer of at least {}", lo);
  throw reel::Error(fmt::format("{}: {} must be {}, got {}", eval, what, expected, v.dump()));
}

int64_t integer(const json& input, std::string_view eval, const char* name, int64_t lo = 0,
                int64_t hi = std::numeric_limits<int64_t>::max(), std::string_view why_hi = "") {
  return integer_of(field(input, name), eval, fmt::format("\"{}\"", name), lo, hi, why_hi);
}

// An array of integers (each through integer_of); `what` as for integer_of.
std::vector<int64_t> integers(const json& v, std::string_view eval, const std::string& what, int64_t lo, int64_t hi) {
  if (!v.is_array()) throw reel::Error(fmt::format("{}: {} must be an array of integers, got {}", eval, what, v.dump()));
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out.push_back(integer_of(v[i], eval, fmt::format("{}[{}]", what, i), lo, hi));
  return out;
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
// The input's field `name` as a tensor.
Tensor input_tensor(const json& input, const char* name) { return tensor_of(field(input, name), name); }

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
  auto x = std::make_shared<Tensor>(input_tensor(input, "x"));
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = f(*x); }, [=] { return json(out->item()); }};
}

Prepared lse_gradient(const json& input) {
  static const auto g = reel::simplegrad(lse, {.compile_after = 1});
  auto x = std::make_shared<Tensor>(input_tensor(input, "x"));
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

int64_t llsq_points(const json& input) { return integer(input, "llsq", "n", 2, 10'000'000, " (the most points this tool takes)"); }

Prepared llsq_primal(const json& input) {
  static const auto f = reel::jit(llsq, {.compile_after = 1});
  auto x = std::make_shared<Tensor>(input_tensor(input, "x"));
  const int64_t n = llsq_points(input);
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = f(*x, n); }, [=] { return json(out->item()); }};
}

Prepared llsq_gradient(const json& input) {
  static const auto g = reel::simplegrad(llsq, {.compile_after = 1});
  auto x = std::make_shared<Tensor>(input_tensor(input, "x"));
  const int64_t n = llsq_points(input);
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = g(*x, n)[1]; }, [=] { return vector_json(*out); }};
}

// ---- ode ------------------------------------------------------------------------------

// s classic RK4 steps of y' = f(y), f(y)_0 = x_0, f(y)_i = x_i y_{i-1}, from y = 0, h = 2/s.
Tensor ode(const Tensor& x, int64_t s) {
  const int64_t n = x.shape().at(0);
  const double h = 2.0 / static_cast<double>(s);
  // f(y) = x * (y shifted down by one, with 1 first): a gather and two elementwise
  // operations, which compile to loops (a concat of slices would be a copying step).
  Tensor shift(reel::DType::i64, {n});
  for (int64_t i = 0; i < n; ++i) shift.mutable_data<int64_t>()[i] = i == 0 ? 0 : i - 1;
  std::vector<double> first(static_cast<std::size_t>(n), 0.0), rest(static_cast<std::size_t>(n), 1.0);
  first[0] = 1.0, rest[0] = 0.0;
  const Tensor e0 = reel::tensor(first, {n}), mask = reel::tensor(rest, {n});
  auto f = [&](const Tensor& y) { return x * (reel::gather(y, shift) * mask + e0); };
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

int64_t ode_steps(const json& input) { return integer(input, "ode", "s", 1, 10'000, " (the most steps this tool traces)"); }

Prepared ode_primal(const json& input) {
  static const auto f = reel::jit(ode, {.compile_after = 1});
  auto x = std::make_shared<Tensor>(input_tensor(input, "x"));
  if (x->numel() < 2) throw reel::Error("ode: expected at least 2 values of x");
  const int64_t s = ode_steps(input);
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = f(*x, s); }, [=] { return vector_json(*out); }};
}

Prepared ode_gradient(const json& input) {
  static const auto g = reel::simplegrad(ode_last, {.compile_after = 1});
  auto x = std::make_shared<Tensor>(input_tensor(input, "x"));
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
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = f(*P, *C); }, [=] { return json(out->item()); }};
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

// ---- gmm ------------------------------------------------------------------------------

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

struct GmmInput {
  Tensor alpha, mu, q, l, x;
  double gamma;
  int64_t m;
};
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

Prepared gmm_objective(const json& input) {
  static const auto f = reel::jit(gmm, {.compile_after = 1});
  auto g = gmm_input(input);
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = f(g->alpha, g->mu, g->q, g->l, g->x, g->gamma, g->m); }, [=] { return json(out->item()); }};
}

Prepared gmm_jacobian(const json& input) {
  static const auto grad = reel::simplegrad(gmm, {.compile_after = 1});
  auto g = gmm_input(input);
  auto out = std::make_shared<std::array<Tensor, 8>>();
  return {[=] { *out = grad(g->alpha, g->mu, g->q, g->l, g->x, g->gamma, g->m); },
          [=] {
            return json{{"alpha", vector_json((*out)[1])},
                        {"mu", matrix_json((*out)[2])},
                        {"q", matrix_json((*out)[3])},
                        {"l", matrix_json((*out)[4])}};
          }};
}

// ---- lstm -----------------------------------------------------------------------------

// The ADBench LSTM (specs/adbench-objectives.md): main_params [2l][4b] (weights and
// biases per layer, gates forget | input | output | cell), extra_params [3][b], state
// [2l][b], sequence [c][b].
Tensor lstm(const Tensor& main, const Tensor& extra, const Tensor& state0, const Tensor& sequence0) {
  const Tensor state = reel::nodiff(state0), sequence = reel::nodiff(sequence0);
  const int64_t layers = main.shape().at(0) / 2, b = main.shape().at(1) / 4, c = sequence.shape().at(0);
  struct Layer {
    Tensor wf, wi, wo, wc, bf, bi, bo, bc;
  };
  std::vector<Layer> L;
  std::vector<Tensor> h, cell;
  for (int64_t j = 0; j < layers; ++j) {
    const Tensor w = reel::index(main, 2 * j), bias = reel::index(main, 2 * j + 1);
    auto part = [&](const Tensor& v, int64_t g) { return reel::slice(v, g * b, (g + 1) * b); };
    L.push_back({part(w, 0), part(w, 1), part(w, 2), part(w, 3), part(bias, 0), part(bias, 1), part(bias, 2), part(bias, 3)});
    h.push_back(reel::index(state, 2 * j));
    cell.push_back(reel::index(state, 2 * j + 1));
  }
  const Tensor in_w = reel::index(extra, 0), out_w = reel::index(extra, 1), out_b = reel::index(extra, 2);
  Tensor total = reel::scalar(0.0);
  Tensor next = reel::index(sequence, 0);
  for (int64_t t = 0; t + 1 < c; ++t) {
    Tensor x = next * in_w;
    for (int64_t j = 0; j < layers; ++j) {
      const Layer& p = L[static_cast<std::size_t>(j)];
      Tensor& hj = h[static_cast<std::size_t>(j)];
      Tensor& cj = cell[static_cast<std::size_t>(j)];
      const Tensor f = reel::sigmoid(x * p.wf + p.bf), i = reel::sigmoid(hj * p.wi + p.bi);
      const Tensor o = reel::sigmoid(x * p.wo + p.bo), g = reel::tanh(hj * p.wc + p.bc);
      cj = cj * f + i * g;
      hj = o * reel::tanh(cj);
      x = hj;
    }
    const Tensor y = x * out_w + out_b;
    const Tensor ynorm = y - reel::log(2.0 + reel::sum(reel::exp(y)));
    next = reel::index(sequence, t + 1);
    total = total + reel::sum(next * ynorm);
  }
  return -total / static_cast<double>((c - 1) * b);
}

struct LstmInput {
  Tensor main, extra, state, sequence;
};
std::shared_ptr<LstmInput> lstm_input(const json& input) {
  auto in = std::make_shared<LstmInput>(LstmInput{input_tensor(input, "main_params"), input_tensor(input, "extra_params"),
                                                  input_tensor(input, "state"), input_tensor(input, "sequence")});
  const int64_t b = in->extra.rank() == 2 ? in->extra.shape()[1] : -1;
  if (in->main.rank() != 2 || in->main.shape()[0] % 2 != 0 || in->main.shape()[0] == 0 ||
      in->main.shape()[1] != 4 * b || in->extra.shape()[0] != 3 || in->state.shape() != reel::Shape{in->main.shape()[0], b} ||
      in->sequence.rank() != 2 || in->sequence.shape()[1] != b || in->sequence.shape()[0] < 2)
    throw reel::Error("lstm: expected main_params [2l][4b], extra_params [3][b], state [2l][b], sequence [c >= 2][b]");
  if (in->sequence.shape()[0] * in->main.shape()[0] > 400'000)
    throw reel::Error("lstm: more steps times layers than this tool traces (200,000)");
  return in;
}

Prepared lstm_objective(const json& input) {
  static const auto f = reel::jit(lstm, {.compile_after = 1});
  auto in = lstm_input(input);
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = f(in->main, in->extra, in->state, in->sequence); }, [=] { return json(out->item()); }};
}

Prepared lstm_jacobian(const json& input) {
  static const auto grad = reel::simplegrad(lstm, {.compile_after = 1});
  auto in = lstm_input(input);
  auto out = std::make_shared<std::array<Tensor, 5>>();
  return {[=] { *out = grad(in->main, in->extra, in->state, in->sequence); },
          [=] {
            json all = vector_json((*out)[1]);
            for (double v : (*out)[2].values()) all.push_back(v);
            return all;
          }};
}

// ---- ba -------------------------------------------------------------------------------

// Reprojection errors of all p observations at once: cams [p, 11] (rotation
// angle-axis, centre, f, u0 v0, k1 k2), X [p, 3], w [p], feat [p, 2] -> [p, 2].
Tensor ba_reproj(const Tensor& cams, const Tensor& X, const Tensor& w, const Tensor& feat0, bool zero_rotation) {
  const Tensor feat = reel::nodiff(feat0);
  auto col = [](const Tensor& t, int64_t a, int64_t b) { return reel::slice(t, 1, a, b); };
  const Tensor rot = col(cams, 0, 3), centre = col(cams, 3, 6), f = col(cams, 6, 7), uv0 = col(cams, 7, 9);
  const Tensor k1 = col(cams, 9, 10), k2 = col(cams, 10, 11);
  const Tensor Xo = X - centre;
  const Tensor theta = reel::sqrt(reel::sum(reel::square(rot), 1, true));  // [p, 1]; not 0 on these inputs
  const Tensor v = rot / theta;
  auto c = [](const Tensor& t, int64_t i) { return reel::slice(t, 1, i, i + 1); };
  const Tensor cross = reel::concat({c(v, 1) * c(Xo, 2) - c(v, 2) * c(Xo, 1), c(v, 2) * c(Xo, 0) - c(v, 0) * c(Xo, 2),
                                     c(v, 0) * c(Xo, 1) - c(v, 1) * c(Xo, 0)},
                                    1);
  const Tensor cos_t = reel::cos(theta);
  // A zero rotation (the reference's sqtheta == 0 branch): X + rot x X, to first order.
  auto rot_cross = [&] {
    return reel::concat({c(rot, 1) * c(Xo, 2) - c(rot, 2) * c(Xo, 1), c(rot, 2) * c(Xo, 0) - c(rot, 0) * c(Xo, 2),
                         c(rot, 0) * c(Xo, 1) - c(rot, 1) * c(Xo, 0)},
                        1);
  };
  const Tensor Xcam = zero_rotation ? Xo + rot_cross()
                                    : Xo * cos_t + cross * reel::sin(theta) + v * (reel::sum(v * Xo, 1, true) * (1.0 - cos_t));
  const Tensor u = col(Xcam, 0, 2) / col(Xcam, 2, 3);
  const Tensor rsq = reel::sum(reel::square(u), 1, true);
  const Tensor proj = u * ((1.0 + k1 * rsq + k2 * rsq * rsq) * f) + uv0;
  return (proj - feat) * reel::expand_dims(w, 1);
}

struct BaInput {
  int64_t n, m, p;
  bool zero_rotation = false;  // the shared camera's rotation is exactly 0
  Tensor cams, X, w, feat;  // per observation (all p computed, as the eval asks)
};
std::shared_ptr<BaInput> ba_input(const json& input) {
  auto b = std::make_shared<BaInput>();
  // (Column indices go up to 11n + 3m + p.)
  b->n = integer(input, "ba", "n", 1, 1'000'000'000, " (the most cameras this tool takes)");
  b->m = integer(input, "ba", "m", 1, 1'000'000'000, " (the most points this tool takes)");
  b->p = integer(input, "ba", "p", 1, 20'000'000, " (the most observations this tool takes)");
  const Tensor cam = input_tensor(input, "cam"), x = input_tensor(input, "x"), feat = input_tensor(input, "feat");
  const double w = number(input, "w");
  if (cam.numel() != 11 || x.numel() != 3 || feat.numel() != 2) throw reel::Error("ba: expected cam[11], x[3], feat[2]");
  b->zero_rotation = cam.values()[0] == 0 && cam.values()[1] == 0 && cam.values()[2] == 0;
  // n cameras, m points; observation i uses camera i mod n and point i mod m.
  std::vector<double> cams, X, feats;
  const auto cv = cam.values(), xv = x.values(), fv = feat.values();
  for (int64_t i = 0; i < b->p; ++i) {
    cams.insert(cams.end(), cv.begin(), cv.end());
    X.insert(X.end(), xv.begin(), xv.end());
    feats.insert(feats.end(), fv.begin(), fv.end());
  }
  b->cams = reel::tensor(cams, {b->p, 11});
  b->X = reel::tensor(X, {b->p, 3});
  b->w = reel::full({b->p}, w);
  b->feat = reel::tensor(feats, {b->p, 2});
  return b;
}

Prepared ba_objective(const json& input) {
  static const auto f = reel::jit(
      [](const Tensor& cams, const Tensor& X, const Tensor& w, const Tensor& feat, bool zero_rotation) {
        return std::tuple{ba_reproj(cams, X, w, feat, zero_rotation), 1.0 - reel::square(w)};
      },
      {.compile_after = 1});
  auto b = ba_input(input);
  auto out = std::make_shared<std::tuple<Tensor, Tensor>>();
  return {[=] { *out = f(b->cams, b->X, b->w, b->feat, b->zero_rotation); },
          [=] {
            const auto e = std::get<0>(*out).values();
            return json{{"reproj_error", {{"elements", {e.at(0), e.at(1)}}, {"repeated", b->p}}},
                        {"w_err", {{"element", std::get<1>(*out).values().at(0)}, {"repeated", b->p}}}};
          }};
}

// The Jacobian's 15 non-zeros per reprojection row, for every observation at once, by
// forward mode: one Jacobian-vector product per camera, point and weight parameter,
// with that parameter's tangent 1 in every observation (each observation depends on
// its own copies only). Weight rows: d(1 - w^2)/dw = -2w.
Prepared ba_jacobian(const json& input) {
  static std::mutex mutex;
  static std::map<std::pair<int64_t, bool>, reel::CompiledFunction> compiled;
  auto b = ba_input(input);
  reel::CompiledFunction fn;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto [it, is_new] = compiled.try_emplace({b->p, b->zero_rotation});
    if (is_new)
      it->second = reel::compile(reel::jvp_tape(reel::trace(
          [z = b->zero_rotation](const Tensor& c, const Tensor& x, const Tensor& w, const Tensor& f) {
            return ba_reproj(c, x, w, f, z);
          },
          b->cams, b->X, b->w, b->feat)));
    fn = it->second;
  }
  auto blocks = std::make_shared<std::vector<Tensor>>(15);  // d reproj [p, 2] per parameter
  auto werr = std::make_shared<Tensor>();
  // The 15 tangent sets, made before the timed runs.
  auto inputs = std::make_shared<std::vector<std::vector<Tensor>>>();
  for (int64_t k = 0; k < 15; ++k) {
    Tensor tc = reel::zeros({b->p, 11}), tx = reel::zeros({b->p, 3}), tw = reel::zeros({b->p});
    Tensor& t = k < 11 ? tc : k < 14 ? tx : tw;
    const int64_t cols = k < 11 ? 11 : k < 14 ? 3 : 1, at = k < 11 ? k : k < 14 ? k - 11 : 0;
    double* d = t.mutable_data<double>();
    for (int64_t i = 0; i < b->p; ++i) d[i * cols + at] = 1.0;
    inputs->push_back({b->cams, b->X, b->w, b->feat, tc, tx, tw, reel::zeros({b->p, 2})});
  }
  return {[=] {
            for (std::size_t k = 0; k < 15; ++k) (*blocks)[k] = fn((*inputs)[k]).at(1);
            *werr = -2.0 * b->w;
          },
          [=] {
            // CSR: rows 2i and 2i+1 hold 15 non-zeros each (camera, point, weight columns),
            // row 2p + i one; the first 30 row offsets and non-zeros, then the last ones.
            json rows = json::array(), cols = json::array(), vals = json::array();
            for (int64_t r = 0; r < 30; ++r) rows.push_back(r <= 2 * b->p ? 15 * r : 30 * b->p + (r - 2 * b->p));
            rows.push_back(31 * b->p);
            const int64_t cam0 = 0, pt0 = 0;
            for (int r = 0; r < 2; ++r)
              for (int64_t k = 0; k < 15; ++k) {
                cols.push_back(k < 11 ? 11 * cam0 + k : k < 14 ? 11 * b->n + 3 * pt0 + (k - 11) : 11 * b->n + 3 * b->m);
                vals.push_back((*blocks)[static_cast<std::size_t>(k)].values().at(static_cast<std::size_t>(r)));
              }
            cols.push_back(11 * b->n + 3 * b->m + b->p - 1);
            vals.push_back(werr->values().at(static_cast<std::size_t>(b->p - 1)));
            return json{{"rows", rows}, {"cols", cols}, {"vals", vals}};
          }};
}

// ---- det ------------------------------------------------------------------------------

// The determinant by expansion by minors along the first row, recursively, with each
// minor computed once: the minors of the bottom k rows are indexed by their column
// subsets S, and det_k(S) = sum over j in S, at position t, of (-1)^t a[l-k][j]
// det_{k-1}(S \ {j}). The same sum as the recursion (l * 2^(l-1) products instead of
// l!), and its gradient, the cofactors, by reverse mode through the gathers.
Tensor det(const Tensor& A, int64_t ell) {
  const Tensor M = reel::reshape(A, {ell, ell});
  // Subsets of {0..l-1} of each size, as bit masks, in increasing order; their positions.
  std::vector<std::vector<uint32_t>> subsets(static_cast<std::size_t>(ell + 1));
  for (uint32_t mask = 0; mask < (1u << ell); ++mask)
    subsets[static_cast<std::size_t>(std::popcount(mask))].push_back(mask);
  std::vector<std::map<uint32_t, int64_t>> position(static_cast<std::size_t>(ell + 1));
  for (std::size_t k = 0; k <= static_cast<std::size_t>(ell); ++k)
    for (std::size_t i = 0; i < subsets[k].size(); ++i) position[k][subsets[k][i]] = static_cast<int64_t>(i);
  Tensor minors = reel::index(M, ell - 1);  // the bottom row's 1x1 minors, by column
  for (int64_t k = 2; k <= ell; ++k) {
    const auto& level = subsets[static_cast<std::size_t>(k)];
    const auto n = static_cast<int64_t>(level.size());
    std::vector<int64_t> cols, prev;
    std::vector<double> signs;
    for (uint32_t S : level) {
      int64_t t = 0;
      for (int64_t j = 0; j < ell; ++j)
        if (S & (1u << j)) {
          cols.push_back(j);
          prev.push_back(position[static_cast<std::size_t>(k - 1)].at(S & ~(1u << j)));
          signs.push_back(t % 2 == 0 ? 1.0 : -1.0);
          ++t;
        }
    }
    auto indices = [&](const std::vector<int64_t>& v) {
      Tensor t(reel::DType::i64, {n, k});
      std::copy(v.begin(), v.end(), t.mutable_data<int64_t>());
      return t;
    };
    const Tensor row = reel::index(M, ell - k);
    minors = reel::sum(reel::tensor(signs, {n, k}) * reel::take(row, indices(cols)) * reel::take(minors, indices(prev)), 1);
  }
  return reel::index(minors, 0);
}

std::shared_ptr<std::pair<Tensor, int64_t>> det_input(const json& input) {
  const int64_t ell = integer(input, "det", "ell", 1, 20, " (the largest matrix this tool takes)");
  Tensor A = input_tensor(input, "A");
  if (A.numel() != ell * ell) throw reel::Error(fmt::format("det: expected A with {} values, got {}", ell * ell, A.numel()));
  return std::make_shared<std::pair<Tensor, int64_t>>(A, ell);
}

Prepared det_primal(const json& input) {
  static const auto f = reel::jit(det, {.compile_after = 1});
  auto in = det_input(input);
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = f(in->first, in->second); }, [=] { return json(out->item()); }};
}

Prepared det_gradient(const json& input) {
  static const auto g = reel::simplegrad(det, {.compile_after = 1});
  auto in = det_input(input);
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = g(in->first, in->second)[1]; }, [=] { return vector_json(*out); }};
}

// ---- ht -------------------------------------------------------------------------------

// The hand model of GradBench's ht eval (gradbench: cpp/gradbench/evals/ht.hpp): theta
// [26] -> pose parameters -> per-bone transforms -> linear-blend skinning of the
// model's vertices -> the residuals against the data points, at vertices
// (correspondences) or at points on triangles given by barycentric us.
struct HandModel {
  std::vector<int64_t> parents;
  std::vector<Tensor> base_relatives, inverse_base_absolutes;  // [4, 4] each
  Tensor positions;                                            // [4, V]
  Tensor weights;                                              // [bones, V]
  bool mirrored = false;
  Tensor corr_a, corr_b, corr_c;  // i64 [c]: vertex indices (a only, without us)
  Tensor points;                  // [3, c]
  bool complicated = false;
};

Tensor matrix3(const std::vector<Tensor>& nine) { return reel::reshape(reel::stack(nine), {3, 3}); }

// R = Rz Ry Rx from the angles (x, z, y), as the reference.
Tensor euler_to_rotation(const Tensor& xzy) {
  const Tensor tx = reel::index(xzy, 0), ty = reel::index(xzy, 2), tz = reel::index(xzy, 1);
  const Tensor one = reel::scalar(1.0), zero = reel::scalar(0.0);
  const Tensor Rx = matrix3({one, zero, zero, zero, reel::cos(tx), -reel::sin(tx), zero, reel::sin(tx), reel::cos(tx)});
  const Tensor Ry = matrix3({reel::cos(ty), zero, reel::sin(ty), zero, one, zero, -reel::sin(ty), zero, reel::cos(ty)});
  const Tensor Rz = matrix3({reel::cos(tz), -reel::sin(tz), zero, reel::sin(tz), reel::cos(tz), zero, zero, zero, one});
  return reel::matmul(reel::matmul(Rz, Ry), Rx);
}

Tensor angle_axis_to_rotation(const Tensor& aa) {
  const Tensor norm = reel::sqrt(reel::sum(reel::square(aa)));
  if (norm < 0.0001) return reel::tensor({1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3});  // (a guard while traced)
  const Tensor x = reel::index(aa, 0) / norm, y = reel::index(aa, 1) / norm, z = reel::index(aa, 2) / norm;
  const Tensor s = reel::sin(norm), c = reel::cos(norm);
  return matrix3({x * x + (1.0 - x * x) * c, x * y * (1.0 - c) - z * s, x * z * (1.0 - c) + y * s,
                  x * y * (1.0 - c) + z * s, y * y + (1.0 - y * y) * c, y * z * (1.0 - c) - x * s,
                  x * z * (1.0 - c) - y * s, z * y * (1.0 - c) + x * s, z * z + (1.0 - z * z) * c});
}

// Residuals [3c] (3i + j: point i, coordinate j).
Tensor hand_residuals(const HandModel& model, const Tensor& theta, const Tensor& us) {
  const auto bones = static_cast<int64_t>(model.parents.size());
  const Tensor zero3 = reel::zeros({3});
  auto th = [&](int64_t i) { return reel::index(theta, i); };
  // Pose parameters, column by column: global rotation, scale (1), translation, then
  // per bone (x, z, y) angles; fingers take 4 values on their first joint's x and y,
  // then x on the next two (the reference's to_pose_params).
  std::vector<Tensor> pose(static_cast<std::size_t>(bones + 3), zero3);
  pose[0] = reel::slice(theta, 0, 3);
  pose[1] = reel::ones({3});
  pose[2] = reel::slice(theta, 3, 6);
  int64_t it = 6, ip = 5;
  const Tensor zero = reel::scalar(0.0);
  for (int finger = 0; finger < 5; ++finger) {
    for (int i = 2; i <= 4; ++i) {
      const Tensor a = th(it++);
      const Tensor b = i == 2 ? th(it++) : zero;
      pose[static_cast<std::size_t>(ip++)] = reel::stack({a, b, zero});
    }
    ++ip;
  }
  // Bone transforms.
  const Tensor bottom = reel::tensor({0, 0, 0, 1}, {1, 4});
  std::vector<Tensor> absolutes(static_cast<std::size_t>(bones)), transforms;
  for (int64_t i = 0; i < bones; ++i) {
    const Tensor R = euler_to_rotation(pose[static_cast<std::size_t>(i + 3)]);
    const Tensor tr = reel::concat({reel::concat({R, reel::zeros({3, 1})}, 1), bottom}, 0);
    const Tensor relative = reel::matmul(model.base_relatives[static_cast<std::size_t>(i)], tr);
    const int64_t parent = model.parents[static_cast<std::size_t>(i)];
    absolutes[static_cast<std::size_t>(i)] =
        parent < 0 ? relative : reel::matmul(absolutes[static_cast<std::size_t>(parent)], relative);
    transforms.push_back(reel::slice(
        reel::matmul(absolutes[static_cast<std::size_t>(i)], model.inverse_base_absolutes[static_cast<std::size_t>(i)]), 0, 0,
        3));
  }
  // Skinning: sum over bones of (transform x base positions) weighted per vertex.
  const Tensor moved = reel::matmul(reel::stack(transforms), model.positions);       // [bones, 3, V]
  Tensor positions = reel::sum(moved * reel::expand_dims(model.weights, 1), 0);      // [3, V]
  if (model.mirrored) positions = positions * reel::tensor({-1, 1, 1}, {3, 1});
  // Global transform: rotation (columns scaled by pose[1], ones), then translation.
  const Tensor R = angle_axis_to_rotation(pose[0]) * reel::expand_dims(pose[1], 0);
  positions = reel::matmul(R, positions) + reel::expand_dims(pose[2], 1);
  Tensor at;  // [3, c]
  if (model.complicated) {
    const Tensor u0 = reel::slice(us, 1, 0, 1), u1 = reel::slice(us, 1, 1, 2);  // [c, 1]
    const Tensor Va = reel::transpose(reel::gather(positions, model.corr_a, 1));  // [c, 3]
    const Tensor Vb = reel::transpose(reel::gather(positions, model.corr_b, 1));
    const Tensor Vc = reel::transpose(reel::gather(positions, model.corr_c, 1));
    at = reel::transpose(u0 * Va + u1 * Vb + (1.0 - u0 - u1) * Vc);
  } else {
    at = reel::gather(positions, model.corr_a, 1);
  }
  return reel::reshape(reel::transpose(model.points - at), {model.points.numel()});
}

std::vector<std::vector<double>> rows_of(const json& v, const char* name, std::size_t cols) {
  if (!v.is_array()) throw reel::Error(fmt::format("ht: expected {} to be an array", name));
  std::vector<std::vector<double>> out;
  for (const json& r : v) {
    if (!r.is_array() || (cols != 0 && r.size() != cols) ||
        !std::all_of(r.begin(), r.end(), [](const json& e) { return e.is_number(); }))
      throw reel::Error(fmt::format("ht: expected {} to hold rows of {} numbers", name, cols));
    out.push_back(r.get<std::vector<double>>());
  }
  return out;
}

Tensor from_rows(const std::vector<std::vector<double>>& rows, std::size_t cols, bool transposed) {
  std::vector<double> flat;
  const auto n = static_cast<int64_t>(rows.size()), k = static_cast<int64_t>(cols);
  if (!transposed) {
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    return reel::tensor(flat, {n, k});
  }
  flat.resize(rows.size() * cols);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) flat[static_cast<std::size_t>(j * n + i)] = rows[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
  return reel::tensor(flat, {k, n});
}

struct HtInput {
  HandModel model;
  Tensor theta, us;
  int64_t c = 0;
};
std::shared_ptr<HtInput> ht_input(const json& input) {
  auto in = std::make_shared<HtInput>();
  in->theta = input_tensor(input, "theta");
  if (in->theta.numel() != 26) throw reel::Error("ht: expected theta with 26 values");
  const json& data = field(input, "data");
  const json& model = field(data, "model");
  HandModel& m = in->model;
  constexpr int64_t bones = 22;
  // bone_count, parents (each before its bone, -1 for the root) and the arrays of 22.
  if (const int64_t count = integer(model, "ht", "bone_count", 0); count != bones)
    throw reel::Error(fmt::format("ht: expected the hand model's {} bones, got \"bone_count\" {}", bones, count));
  m.parents = integers(field(model, "parents"), "ht", "\"parents\"", -1, bones - 2);
  if (static_cast<int64_t>(m.parents.size()) != bones)
    throw reel::Error(fmt::format("ht: \"bone_count\" is {} but \"parents\" has {}", bones, m.parents.size()));
  for (std::size_t i = 0; i < m.parents.size(); ++i)
    if (m.parents[i] >= static_cast<int64_t>(i))
      throw reel::Error(fmt::format("ht: \"parents\"[{}] is {}: a bone's parent must come before it", i, m.parents[i]));
  for (const char* name : {"base_relatives", "inverse_base_absolutes"}) {
    const json& mats = field(model, name);
    if (!mats.is_array() || mats.size() != bones) throw reel::Error(fmt::format("ht: expected {} 4x4 {}", bones, name));
    for (const json& mat : mats)
      (std::string(name) == "base_relatives" ? m.base_relatives : m.inverse_base_absolutes)
          .push_back(from_rows(rows_of(mat, name, 4), 4, false));
  }
  m.positions = from_rows(rows_of(field(model, "base_positions"), "base_positions", 4), 4, true);  // [4, V]
  m.weights = from_rows(rows_of(field(model, "weights"), "weights", bones), bones, true);        // [bones, V]
  if (m.weights.shape()[1] != m.positions.shape()[1]) throw reel::Error("ht: expected one weights row per vertex");
  const json& mirrored = field(model, "is_mirrored");
  if (!mirrored.is_boolean()) throw reel::Error(fmt::format("ht: \"is_mirrored\" must be true or false, got {}", mirrored.dump()));
  m.mirrored = mirrored.get<bool>();
  const int64_t V = m.positions.shape()[1];
  const json& us = field(input, "us");
  m.complicated = us.is_array() && !us.empty();
  // Vertex indices, or (with us) triangle indices whose corners are vertex indices.
  std::vector<std::vector<int64_t>> tris;
  if (m.complicated) {
    const json& t = field(model, "triangles");
    if (!t.is_array()) throw reel::Error(fmt::format("ht: \"triangles\" must be an array, got {}", t.dump()));
    for (std::size_t i = 0; i < t.size(); ++i) {
      const std::string what = fmt::format("\"triangles\"[{}]", i);
      tris.push_back(integers(t[i], "ht", what, 0, V - 1));
      if (tris.back().size() != 3) throw reel::Error(fmt::format("ht: {} must hold 3 vertex indices", what));
    }
  }
  const auto corr = integers(field(data, "correspondences"), "ht", "\"correspondences\"", 0,
                             m.complicated ? static_cast<int64_t>(tris.size()) - 1 : V - 1);
  in->c = static_cast<int64_t>(corr.size());
  m.points = from_rows(rows_of(field(data, "points"), "points", 3), 3, true);  // [3, c]
  if (m.points.shape()[1] != in->c) throw reel::Error("ht: expected one point per correspondence");
  auto index_tensor = [&](const std::vector<int64_t>& v) {
    Tensor t(reel::DType::i64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.mutable_data<int64_t>());
    return t;
  };
  if (m.complicated) {
    std::vector<int64_t> a, b, cc;
    for (int64_t t : corr) {
      a.push_back(tris[static_cast<std::size_t>(t)][0]);
      b.push_back(tris[static_cast<std::size_t>(t)][1]);
      cc.push_back(tris[static_cast<std::size_t>(t)][2]);
    }
    m.corr_a = index_tensor(a), m.corr_b = index_tensor(b), m.corr_c = index_tensor(cc);
    in->us = from_rows(rows_of(us, "us", 2), 2, false);
    if (in->us.shape()[0] != in->c) throw reel::Error("ht: expected one us row per correspondence");
  } else {
    m.corr_a = index_tensor(corr);
    in->us = reel::zeros({in->c, 2});
  }
  return in;
}

Prepared ht_objective(const json& input) {
  auto in = ht_input(input);
  auto f = std::make_shared<reel::CompiledFunction>(reel::compile(
      reel::trace([m = &in->model](const Tensor& theta, const Tensor& us) { return hand_residuals(*m, theta, us); },
                  in->theta, in->us)));
  auto out = std::make_shared<Tensor>();
  return {[=] { *out = (*f)({in->theta, in->us}).at(0); }, [=] { return vector_json(*out); }};
}

// The Jacobian by forward mode: one Jacobian-vector product per theta entry (a column
// of 3c values) and, with us, two more with every point's u_0 (u_1) tangent 1 (each
// residual depends on its own point's us only).
Prepared ht_jacobian(const json& input) {
  auto in = ht_input(input);
  auto f = std::make_shared<reel::CompiledFunction>(reel::compile(reel::jvp_tape(
      reel::trace([m = &in->model](const Tensor& theta, const Tensor& us) { return hand_residuals(*m, theta, us); },
                  in->theta, in->us))));
  const int64_t extra = in->model.complicated ? 2 : 0, cols = 26 + extra;
  auto tangent_sets = std::make_shared<std::vector<std::vector<Tensor>>>();
  for (int64_t k = 0; k < cols; ++k) {
    Tensor tt = reel::zeros({26}), tu = reel::zeros({in->c, 2});
    if (k < extra) {
      for (int64_t i = 0; i < in->c; ++i) tu.mutable_data<double>()[i * 2 + k] = 1.0;
    } else {
      tt.mutable_data<double>()[k - extra] = 1.0;
    }
    tangent_sets->push_back({in->theta, in->us, tt, tu});
  }
  auto columns = std::make_shared<std::vector<Tensor>>(static_cast<std::size_t>(cols));
  return {[=] {
            for (std::size_t k = 0; k < columns->size(); ++k) (*columns)[k] = (*f)((*tangent_sets)[k]).at(1);
          },
          [=] {
            std::vector<std::vector<double>> values;
            for (const Tensor& col : *columns) values.push_back(col.values());
            json rows = json::array();
            for (int64_t r = 0; r < 3 * in->c; ++r) {
              std::vector<double> row;
              for (const auto& col : values) row.push_back(col[static_cast<std::size_t>(r)]);
              rows.push_back(row);
            }
            return rows;
          }};
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
      {"gmm", {{"objective", gmm_objective}, {"jacobian", gmm_jacobian}}},
      {"lstm", {{"objective", lstm_objective}, {"jacobian", lstm_jacobian}}},
      {"ba", {{"objective", ba_objective}, {"jacobian", ba_jacobian}}},
      {"det", {{"primal", det_primal}, {"gradient", det_gradient}}},
      {"ht", {{"objective", ht_objective}, {"jacobian", ht_jacobian}}},
  };
  return m;
}

}  // namespace gradbench
