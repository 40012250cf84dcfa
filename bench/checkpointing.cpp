#include "checkpointing.hpp"

#include <fmt/format.h>
#include <reel/reel.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <variant>
#include <vector>

#include <sys/resource.h>

#include "measure.hpp"

namespace bench {

namespace {

using reel::Tensor;

int64_t bytes_of(const reel::VarType& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n * static_cast<int64_t>(reel::dtype_size(t.dtype));
}

// What a gradient tape keeps for its backward pass: its stacks (values with a leading
// axis: in this benchmark, the residuals forward scans stack; nothing else has one),
// plus the most one of its operations keeps while it runs: the stacks of a loop's or
// call's body (a checkpointed segment recomputed with its residuals), or a revolve
// driver's snapshots (carries) and one step's residuals.
int64_t kept_bytes(const reel::Tape& t) {
  int64_t stacks = 0, inner = 0;
  for (const reel::Op& op : t.ops) {
    if (op.kind == reel::OpKind::input) continue;
    if (op.type.shape.size() >= 2) stacks += bytes_of(op.type);
    if (op.kind != reel::OpKind::call) continue;
    if (op.prim->name == "revolve") {
      const reel::Tape& f = op.attrs.tape("forward");
      const auto K = static_cast<std::size_t>(op.attrs.integer("num_carry"));
      const auto Y = static_cast<std::size_t>(op.attrs.integer("num_ys"));
      int64_t carry = 0, residuals = 0;
      for (std::size_t o = 0; o < f.outputs.size(); ++o)
        if (o < K) carry += bytes_of(f.type(f.outputs[o]));
        else if (o >= K + Y) residuals += bytes_of(f.type(f.outputs[o]));
      inner = std::max(inner, op.attrs.integer("snapshots") * carry + residuals);
      continue;
    }
    for (const auto& [name, value] : op.attrs.items())
      if (const auto* body = std::get_if<reel::TapeRef>(&value)) inner = std::max(inner, kept_bytes(*body->tape));
  }
  return stacks + inner;
}

int64_t isqrt_up(int64_t n) {
  auto k = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
  while (k * k < n) ++k;
  return std::max<int64_t>(k, 1);
}

// store, every:K, sqrt, binomial:S (S a number or `sqrt`: ceil(sqrt n)).
reel::Checkpoint parse_policy(const std::string& p, int64_t n) {
  const auto colon = p.find(':');
  const std::string kind = p.substr(0, colon), arg = colon == std::string::npos ? "" : p.substr(colon + 1);
  const int64_t k = arg == "sqrt" ? isqrt_up(n) : arg.empty() ? 0 : std::stoll(arg);
  if (kind == "every") return reel::Checkpoint::every(k);
  if (kind == "sqrt") return reel::Checkpoint::sqrt();
  if (kind == "binomial") return reel::Checkpoint::binomial(k);
  return {};
}

// The gradient of the n-step recurrence, as one scan.
reel::Tape gradient_tape(int64_t n, reel::Checkpoint policy, const Tensor& x0) {
  return reel::grad_tape(reel::trace([&](const Tensor& x) {
    return reel::sum(reel::scan([](const Tensor& c, const reel::None&) {
      return std::pair{reel::sin(c) * 1.01 + reel::square(c) * 0.001, reel::none};
    }, x, reel::none, {.length = n, .checkpoint = policy}).first);
  }, x0));
}

struct Row {
  std::string policy, mode;
  int64_t n = 0, kept = 0;
  double ms = 0, rss_base = 0, rss_peak = 0, checksum = 0;
  double store_ms = 0;  // storing everything, timed in the same process, alternating
};

Row run_row(const std::string& self, const std::string& policy, int64_t n, const std::string& mode, bool quick) {
  const std::string out = run_child(
      fmt::format("'{}' --checkpoint-row {} {} {}{}", self, policy, n, mode, quick ? " --quick" : ""));
  Row r{policy, mode, n};
  std::sscanf(out.c_str(), "%lf %ld %lf %lf %lf %lf", &r.ms, &r.kept, &r.rss_base, &r.rss_peak, &r.checksum,
              &r.store_ms);
  return r;
}

std::string bytes_str(int64_t b) {
  if (b < 10 * 1024) return fmt::format("{} B", b);
  if (b < 10 * 1024 * 1024) return fmt::format("{:.0f} KB", static_cast<double>(b) / 1024.0);
  return fmt::format("{:.0f} MB", static_cast<double>(b) / (1024.0 * 1024.0));
}

}  // namespace

int checkpoint_row_mode(const std::string& policy, long n, const std::string& mode) {
  reel::compile(reel::trace([](const Tensor& v) { return v * 2.0; }, reel::zeros({1})));  // JIT start-up
  const Tensor x0 = reel::randn({8}, 1) * 0.5;
  // The policy's gradient and, to time against, storing everything's: both tapes (and
  // compiled functions) made before the memory is measured; neither grows with n.
  std::vector<std::function<std::vector<Tensor>()>> calls;
  std::vector<reel::Tape> tapes;
  std::vector<reel::CompiledFunction> compiled;
  for (const std::string& p : {policy, std::string("store")}) {
    tapes.push_back(gradient_tape(n, parse_policy(p, n), x0));
    if (mode == "compiled") compiled.push_back(reel::compile(tapes.back()));
    if (p == "store" && policy == "store") break;
  }
  for (std::size_t i = 0; i < tapes.size(); ++i)
    calls.push_back(mode == "compiled" ? std::function([&, i] { return compiled[i]({x0}); })
                                       : std::function([&, i] { return reel::play(tapes[i], {x0}); }));
  const double base = current_rss_mb();
  // The policy's first call (its peak RSS is reached there), then rounds alternating
  // the policy and storing everything, for a ratio that a slow spell of the machine
  // hits alike: the medians of at least 3 rounds (1 with --quick) and 0.3 s.
  const double checksum = reel::sum(calls[0]().at(1)).item();
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  std::vector<std::vector<double>> ms(calls.size());
  const auto start = Clock::now();
  while (ms[0].size() < static_cast<std::size_t>(rounds.count >= 15 ? 3 : 1) || seconds_since(start) < 0.3)
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const auto t0 = Clock::now();
      calls[i]();
      ms[i].push_back(seconds_since(t0) * 1e3);
    }
  std::vector<double> median;
  for (std::vector<double>& v : ms) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    median.push_back(v[v.size() / 2]);
  }
  fmt::print("{} {} {} {} {:.17g} {}\n", median[0], kept_bytes(tapes[0]), base,
             static_cast<double>(u.ru_maxrss) / 1024.0, checksum, median.back());
  return 0;
}

int checkpoint_table(const std::string& self, bool quick) {
  const std::vector<std::string> policies{"store", "every:100", "sqrt", "binomial:sqrt", "binomial:100"};
  std::vector<int64_t> sizes{1000, 10000, 100000};
  if (!quick) sizes.push_back(1000000);
  fmt::print("Checkpointing: the gradient of an n-step scan, x = sin(x) * 1.01 + square(x) * 0.001 on 8 doubles.\n"
             "kept: the stacks and snapshots the gradient holds for its backward pass (from its tape); RSS: the\n"
             "row process's resident memory before the policy's first gradient and its peak then; time: the\n"
             "median gradient call; ratio: to storing everything's, timed in the same process in alternation;\n"
             "grad: agrees with storing everything.\n");
  for (const std::string mode : {"play", "compiled"}) {
    fmt::print("\n{:>8} {:<18} {:>9} {:>10} {:>10} {:>11} {:>6} {:>5}   ({})\n", "n", "policy", "kept", "RSS before",
               "RSS peak", "time", "ratio", "grad", mode == "play" ? "interpreted: reel::play" : "compiled");
    for (int64_t n : sizes) {
      double store_checksum = 0;
      for (const std::string& p : policies) {
        const Row r = run_row(self, p, n, mode, quick);
        if (p == "store") store_checksum = r.checksum;
        const bool agrees = std::abs(r.checksum - store_checksum) <= 1e-9 * std::max(1.0, std::abs(store_checksum));
        std::string name = p;
        if (name == "sqrt") name = fmt::format("sqrt (every:{})", isqrt_up(n));
        if (name == "binomial:sqrt") name = fmt::format("binomial:{}", isqrt_up(n));
        fmt::print("{:>8} {:<18} {:>9} {:>7.1f} MB {:>7.1f} MB {:>8.1f} ms {:>5.2f}x {:>5}\n", n, name,
                   bytes_str(r.kept), r.rss_base, r.rss_peak, r.ms, r.ms / r.store_ms, agrees ? "yes" : "NO");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace bench
