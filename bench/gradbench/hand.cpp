// Hand-written C++ for GradBench's lse, gmm, lstm and ode: each objective and its
// derivative written out by hand, as a careful programmer would (one thread, no AD),
// speaking GradBench's protocol like reel-gradbench, so that bench/gradbench/run.py
// times both the same way. Not a test: bench/gradbench/run.py checks its outputs
// against reel-gradbench's.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <numbers>
#include <string>
#include <vector>

using json = nlohmann::json;
using Vec = std::vector<double>;

namespace {

// ---- lse ----
double lse(const Vec& x) {
  double a = x[0];
  for (double v : x) a = std::max(a, v);
  double s = 0;
  for (double v : x) s += std::exp(v - a);
  return a + std::log(s);
}
Vec lse_grad(const Vec& x) {
  double a = x[0];
  for (double v : x) a = std::max(a, v);
  Vec g(x.size());
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += g[i] = std::exp(x[i] - a);
  for (double& v : g) v /= s;
  return g;
}

// ---- gmm (GradBench's variant) ----
struct Gmm {
  int d, k, n, m;
  double gamma;
  Vec alpha, mu, q, l, x;  // row-major
};
double log_gamma_d(double a, int d) {
  double r = d * (d - 1) / 4.0 * std::log(std::numbers::pi);
  for (int j = 1; j <= d; ++j) r += std::lgamma(a + (1 - j) / 2.0);
  return r;
}
// The objective, and with grad != nullptr its gradient {alpha, mu, q, l} by hand.
double gmm(const Gmm& g, Vec* d_alpha, Vec* d_mu, Vec* d_q, Vec* d_l) {
  const int d = g.d, k = g.k, n = g.n, L = d * (d - 1) / 2;
  const bool grad = d_alpha != nullptr;
  if (grad) {
    d_alpha->assign(k, 0), d_mu->assign(static_cast<std::size_t>(k * d), 0), d_q->assign(static_cast<std::size_t>(k * d), 0);
    d_l->assign(static_cast<std::size_t>(k * L), 0);
  }
  Vec sumq(k), expq(static_cast<std::size_t>(k * d));
  for (int j = 0; j < k; ++j)
    for (int a = 0; a < d; ++a) sumq[j] += g.q[j * d + a], expq[j * d + a] = std::exp(g.q[j * d + a]);
  Vec beta(k), dc(d);
  std::vector<Vec> Qxs(k, Vec(d)), xcs(k, Vec(d));
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const double* xi = &g.x[static_cast<std::size_t>(i * d)];
    double bmax = -INFINITY;
    for (int j = 0; j < k; ++j) {
      Vec& c = xcs[j];
      Vec& y = Qxs[j];
      for (int a = 0; a < d; ++a) c[a] = xi[a] - g.mu[j * d + a];
      // y = Q c: Q's diagonal exp(q), strict lower part from l column by column.
      for (int a = 0; a < d; ++a) y[a] = expq[j * d + a] * c[a];
      int next = 0;
      for (int col = 0; col < d; ++col)
        for (int row = col + 1; row < d; ++row) y[row] += g.l[j * L + next++] * c[col];
      double sq = 0;
      for (int a = 0; a < d; ++a) sq += y[a] * y[a];
      beta[j] = g.alpha[j] + sumq[j] - 0.5 * sq;
      bmax = std::max(bmax, beta[j]);
    }
    double s = 0;
    for (int j = 0; j < k; ++j) s += std::exp(beta[j] - bmax);
    total += bmax + std::log(s);
    if (!grad) continue;
    for (int j = 0; j < k; ++j) {
      const double w = std::exp(beta[j] - bmax) / s;  // d lse / d beta_j
      (*d_alpha)[j] += w;
      const Vec& c = xcs[j];
      const Vec& y = Qxs[j];
      // beta_j = alpha_j + sum q_j - 1/2 |Q c|^2: d/dy = -y, d/dc = -Q^T y.
      std::fill(dc.begin(), dc.end(), 0.0);
      for (int a = 0; a < d; ++a) {
        (*d_q)[j * d + a] += w * (1.0 - y[a] * expq[j * d + a] * c[a]);
        dc[a] -= w * expq[j * d + a] * y[a];
      }
      int next = 0;
      for (int col = 0; col < d; ++col)
        for (int row = col + 1; row < d; ++row, ++next) {
          (*d_l)[j * L + next] -= w * y[row] * c[col];
          dc[col] -= w * g.l[j * L + next] * y[row];
        }
      for (int a = 0; a < d; ++a) (*d_mu)[j * d + a] -= dc[a];
    }
  }
  double amax = g.alpha[0];
  for (double a : g.alpha) amax = std::max(amax, a);
  double sa = 0;
  for (double a : g.alpha) sa += std::exp(a - amax);
  const double lse_alpha = amax + std::log(sa);
  double wishart = 0;
  for (int j = 0; j < k; ++j) {
    double e = 0, ll = 0;
    for (int a = 0; a < d; ++a) e += std::exp(2 * g.q[j * d + a]);
    for (int b = 0; b < L; ++b) ll += g.l[j * L + b] * g.l[j * L + b];
    wishart += 0.5 * g.gamma * g.gamma * (e + ll) - g.m * sumq[j];
  }
  const double nw = d + g.m + 1;
  const double C = nw * d * (std::log(g.gamma) - 0.5 * std::log(2.0)) - log_gamma_d(0.5 * nw, d);
  if (grad) {
    for (int j = 0; j < k; ++j) {
      (*d_alpha)[j] -= n * std::exp(g.alpha[j] - amax) / sa;
      for (int a = 0; a < d; ++a)
        (*d_q)[j * d + a] -= g.gamma * g.gamma * std::exp(2 * g.q[j * d + a]) - g.m;
      for (int b = 0; b < L; ++b) (*d_l)[j * L + b] -= g.gamma * g.gamma * g.l[j * L + b];
    }
  }
  return -(n * d / 2.0) * std::log(2 * std::numbers::pi) + total - n * lse_alpha - wishart + k * C;
}

// ---- lstm (ADBench) ----
struct Lstm {
  int l, b, c;
  Vec main, extra, state, seq;  // main [2l][4b], extra [3][b], state [2l][b], seq [c][b]
};
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
// The objective, and with d_main != nullptr the gradient by hand (backpropagation
// through time over the stored forward values).
double lstm(const Lstm& p, Vec* d_main, Vec* d_extra) {
  const int l = p.l, b = p.b, c = p.c;
  auto W = [&](int layer, int gate, int i) { return p.main[(2 * layer) * 4 * b + gate * b + i]; };
  auto B = [&](int layer, int gate, int i) { return p.main[(2 * layer + 1) * 4 * b + gate * b + i]; };
  const double* in_w = &p.extra[0];
  const double* out_w = &p.extra[b];
  const double* out_b = &p.extra[2 * b];
  const bool grad = d_main != nullptr;
  // Stored per step and layer: input x, previous h and c, gates, new c and h.
  struct Step {
    Vec x, h0, c0, f, i, o, g, c1, h1;
  };
  std::vector<std::vector<Step>> steps(grad ? static_cast<std::size_t>(c - 1) : 0, std::vector<Step>(l));
  std::vector<Vec> ys(grad ? c - 1 : 0);
  std::vector<double> sums(grad ? c - 1 : 0);
  std::vector<Vec> h(l), cell(l);
  for (int j = 0; j < l; ++j) {
    h[j].assign(&p.state[(2 * j) * b], &p.state[(2 * j) * b] + b);
    cell[j].assign(&p.state[(2 * j + 1) * b], &p.state[(2 * j + 1) * b] + b);
  }
  double total = 0;
  Vec x(b), y(b);
  for (int t = 0; t + 1 < c; ++t) {
    for (int a = 0; a < b; ++a) x[a] = p.seq[t * b + a] * in_w[a];
    for (int j = 0; j < l; ++j) {
      Step s;
      if (grad) s.x = x, s.h0 = h[j], s.c0 = cell[j], s.f.resize(b), s.i.resize(b), s.o.resize(b), s.g.resize(b);
      for (int a = 0; a < b; ++a) {
        const double f = sigmoid(x[a] * W(j, 0, a) + B(j, 0, a));
        const double i = sigmoid(h[j][a] * W(j, 1, a) + B(j, 1, a));
        const double o = sigmoid(x[a] * W(j, 2, a) + B(j, 2, a));
        const double g = std::tanh(h[j][a] * W(j, 3, a) + B(j, 3, a));
        cell[j][a] = cell[j][a] * f + i * g;
        h[j][a] = o * std::tanh(cell[j][a]);
        if (grad) s.f[a] = f, s.i[a] = i, s.o[a] = o, s.g[a] = g;
      }
      x = h[j];
      if (grad) s.c1 = cell[j], s.h1 = h[j], steps[t][j] = std::move(s);
    }
    double se = 0;
    for (int a = 0; a < b; ++a) y[a] = x[a] * out_w[a] + out_b[a], se += std::exp(y[a]);
    const double lg = std::log(2 + se);
    for (int a = 0; a < b; ++a) total += p.seq[(t + 1) * b + a] * (y[a] - lg);
    if (grad) ys[t] = y, sums[t] = se;
  }
  const double scale = -1.0 / ((c - 1) * b);
  if (!grad) return scale * total;
  d_main->assign(p.main.size(), 0), d_extra->assign(p.extra.size(), 0);
  auto dW = [&](int layer, int gate, int i) -> double& { return (*d_main)[(2 * layer) * 4 * b + gate * b + i]; };
  auto dB = [&](int layer, int gate, int i) -> double& { return (*d_main)[(2 * layer + 1) * 4 * b + gate * b + i]; };
  std::vector<Vec> dh(l, Vec(b, 0.0)), dc(l, Vec(b, 0.0));  // adjoints of the state carried back
  for (int t = c - 2; t >= 0; --t) {
    // total += sum seq[t+1] (y - log(2 + sum exp y)).
    Vec dx(b);
    double sseq = 0;
    for (int a = 0; a < b; ++a) sseq += p.seq[(t + 1) * b + a];
    const Vec& last = steps[t][l - 1].h1;
    for (int a = 0; a < b; ++a) {
      const double dy = scale * (p.seq[(t + 1) * b + a] - sseq * std::exp(ys[t][a]) / (2 + sums[t]));
      (*d_extra)[b + a] += dy * last[a];
      (*d_extra)[2 * b + a] += dy;
      dx[a] = dy * out_w[a];
    }
    for (int j = l - 1; j >= 0; --j) {
      const Step& s = steps[t][j];
      Vec dxin(b), dh0(b), dc0(b);
      for (int a = 0; a < b; ++a) {
        const double dht = dx[a] + dh[j][a];
        const double tc = std::tanh(s.c1[a]);
        const double dcell = dc[j][a] + dht * s.o[a] * (1 - tc * tc);
        const double do_ = dht * tc * s.o[a] * (1 - s.o[a]);
        const double df = dcell * s.c0[a] * s.f[a] * (1 - s.f[a]);
        const double di = dcell * s.g[a] * s.i[a] * (1 - s.i[a]);
        const double dg = dcell * s.i[a] * (1 - s.g[a] * s.g[a]);
        dW(j, 0, a) += df * s.x[a], dB(j, 0, a) += df;
        dW(j, 1, a) += di * s.h0[a], dB(j, 1, a) += di;
        dW(j, 2, a) += do_ * s.x[a], dB(j, 2, a) += do_;
        dW(j, 3, a) += dg * s.h0[a], dB(j, 3, a) += dg;
        dxin[a] = df * W(j, 0, a) + do_ * W(j, 2, a);
        dh0[a] = di * W(j, 1, a) + dg * W(j, 3, a);
        dc0[a] = dcell * s.f[a];
      }
      dh[j] = dh0, dc[j] = dc0, dx = dxin;
    }
    for (int a = 0; a < b; ++a) (*d_extra)[a] += dx[a] * p.seq[t * b + a];
  }
  return scale * total;
}

// ---- ode (GradBench's RK4) ----
// f(y)_0 = x_0, f(y)_i = x_i y_{i-1}, into z.
void ode_f(const Vec& x, const Vec& y, Vec& z) {
  z[0] = x[0];
  for (std::size_t i = 1; i < x.size(); ++i) z[i] = x[i] * y[i - 1];
}
// The adjoint of z = f(y): adds dz's contributions to dx and dy.
void ode_f_adjoint(const Vec& x, const Vec& y, const Vec& dz, Vec& dx, Vec& dy) {
  dx[0] += dz[0];
  for (std::size_t i = 1; i < x.size(); ++i) dx[i] += dz[i] * y[i - 1], dy[i - 1] += dz[i] * x[i];
}
// One RK4 step's stages from y: k_j = f(u_j) with u_1 = y, u_2 = y + h/2 k_1,
// u_3 = y + h/2 k_2, u_4 = y + h k_3 (u[0] is unused: u_1 is y itself).
struct Rk4 {
  std::array<Vec, 4> k, u;
  explicit Rk4(std::size_t n) { k.fill(Vec(n)), u.fill(Vec(n)); }
};
void rk4_stages(const Vec& x, const Vec& y, double h, Rk4& r) {
  constexpr std::array<double, 4> c{0, 0.5, 0.5, 1};
  ode_f(x, y, r.k[0]);
  for (int j = 1; j < 4; ++j) {
    for (std::size_t i = 0; i < y.size(); ++i) r.u[j][i] = y[i] + c[j] * h * r.k[j - 1][i];
    ode_f(x, r.u[j], r.k[j]);
  }
}
// y after s classic RK4 steps from y = 0 (h = 2/s); with ys != nullptr, the y before
// each step is kept there (s rows of n), for the gradient.
Vec ode(const Vec& x, int s, std::vector<Vec>* ys = nullptr) {
  const std::size_t n = x.size();
  const double h = 2.0 / s;
  Vec y(n, 0.0);
  Rk4 r(n);
  for (int step = 0; step < s; ++step) {
    if (ys != nullptr) (*ys)[step] = y;
    rk4_stages(x, y, h, r);
    for (std::size_t i = 0; i < n; ++i) y[i] += h / 6 * (r.k[0][i] + 2 * r.k[1][i] + 2 * r.k[2][i] + r.k[3][i]);
  }
  return y;
}
// The gradient of the last y with respect to x, by hand: the forward run keeps each
// step's y; the backward one recomputes the step's stages from it and runs their
// adjoints in reverse, k_4 first.
Vec ode_grad(const Vec& x, int s) {
  const std::size_t n = x.size();
  const double h = 2.0 / s;
  std::vector<Vec> ys(static_cast<std::size_t>(s));
  ode(x, s, &ys);
  constexpr std::array<double, 4> c{0, 0.5, 0.5, 1}, weight{1.0 / 6, 1.0 / 3, 1.0 / 3, 1.0 / 6};
  Vec dx(n, 0.0), dy(n, 0.0), dk(n), du(n);
  dy[n - 1] = 1;
  Rk4 r(n);
  for (int step = s - 1; step >= 0; --step) {
    const Vec& y = ys[step];
    rk4_stages(x, y, h, r);
    // y' = y + h (k_1/6 + k_2/3 + k_3/3 + k_4/6): y' 's adjoint reaches y directly and
    // each k_j; u_j = y + c_j h k_{j-1} passes u_j's adjoint on to y and to k_{j-1}.
    const Vec dnext = dy;
    std::fill(du.begin(), du.end(), 0.0);
    for (int j = 3; j >= 0; --j) {
      for (std::size_t i = 0; i < n; ++i) dk[i] = weight[j] * h * dnext[i] + (j < 3 ? c[j + 1] * h * du[i] : 0.0);
      std::fill(du.begin(), du.end(), 0.0);
      ode_f_adjoint(x, j == 0 ? y : r.u[j], dk, dx, du);
      for (std::size_t i = 0; i < n; ++i) dy[i] += du[i];
    }
  }
  return dx;
}

Vec flat(const json& v) {
  Vec out;
  if (!v.is_array()) return {v.get<double>()};
  for (const json& e : v)
    if (e.is_array()) for (const json& x : e) out.push_back(x.get<double>());
    else out.push_back(e.get<double>());
  return out;
}
json rows(const Vec& v, int n, int k) {
  json out = json::array();
  for (int i = 0; i < n; ++i) out.push_back(Vec(v.begin() + i * k, v.begin() + (i + 1) * k));
  return out;
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    const json msg = json::parse(line);
    const json id = msg.at("id");
    const std::string kind = msg.value("kind", "");
    json reply = {{"id", id}};
    if (kind == "start") reply["tool"] = "hand";
    if (kind == "define") {
      const std::string module = msg.at("module");
      reply["success"] = module == "lse" || module == "gmm" || module == "lstm" || module == "ode";
    }
    if (kind == "evaluate") {
      const std::string module = msg.at("module"), fn = msg.at("function");
      const json& in = msg.at("input");
      // `run` computes (timed); `output` converts the last result to JSON (not timed).
      std::function<void()> run;
      std::function<json()> output;
      auto scalar = std::make_shared<double>();
      auto vec = std::make_shared<Vec>();
      if (module == "lse") {
        const Vec x = flat(in.at("x"));
        if (fn == "primal") run = [x, scalar] { *scalar = lse(x); }, output = [scalar] { return json(*scalar); };
        else run = [x, vec] { *vec = lse_grad(x); }, output = [vec] { return json(*vec); };
      } else if (module == "gmm") {
        Gmm g{in.at("d"), in.at("k"), in.at("n"), in.at("m"), in.at("gamma"), flat(in.at("alpha")), flat(in.at("mu")),
              flat(in.at("q")), flat(in.at("l")), flat(in.at("x"))};
        if (fn == "objective") {
          run = [g, scalar] { *scalar = gmm(g, nullptr, nullptr, nullptr, nullptr); };
          output = [scalar] { return json(*scalar); };
        } else {
          auto parts = std::make_shared<std::array<Vec, 4>>();
          run = [g, parts] { gmm(g, &(*parts)[0], &(*parts)[1], &(*parts)[2], &(*parts)[3]); };
          output = [g, parts] {
            return json{{"alpha", (*parts)[0]}, {"mu", rows((*parts)[1], g.k, g.d)}, {"q", rows((*parts)[2], g.k, g.d)},
                        {"l", rows((*parts)[3], g.k, g.d * (g.d - 1) / 2)}};
          };
        }
      } else if (module == "ode") {
        const Vec x = flat(in.at("x"));
        const int steps = in.at("s");
        if (fn == "primal") run = [x, steps, vec] { *vec = ode(x, steps); };
        else run = [x, steps, vec] { *vec = ode_grad(x, steps); };
        output = [vec] { return json(*vec); };
      } else {
        Lstm p;
        p.main = flat(in.at("main_params")), p.extra = flat(in.at("extra_params"));
        p.state = flat(in.at("state")), p.seq = flat(in.at("sequence"));
        p.b = static_cast<int>(in.at("extra_params").at(0).size());
        p.l = static_cast<int>(in.at("main_params").size()) / 2;
        p.c = static_cast<int>(in.at("sequence").size());
        if (fn == "objective") {
          run = [p, scalar] { *scalar = lstm(p, nullptr, nullptr); };
          output = [scalar] { return json(*scalar); };
        } else {
          run = [p, vec] {
            Vec de;
            lstm(p, vec.get(), &de);
            vec->insert(vec->end(), de.begin(), de.end());
          };
          output = [vec] { return json(*vec); };
        }
      }
      run();  // one untimed run first, as the other tools get (Reel's prepare, PyTorch's warm-up)
      const double min_runs = in.value("min_runs", 1.0), min_seconds = in.value("min_seconds", 0.0);
      json timings = json::array();
      double total = 0;
      for (int r = 0; r < min_runs || total < min_seconds * 1e9; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        run();
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
        timings.push_back({{"name", "evaluate"}, {"nanoseconds", ns}});
        total += static_cast<double>(ns);
      }
      reply = {{"id", id}, {"success", true}, {"output", output()}, {"timings", timings}};
    }
    std::cout << reply.dump() << '\n' << std::flush;
  }
}
