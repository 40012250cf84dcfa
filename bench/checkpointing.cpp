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
};

Row run_row(const std::string& self, const std::string& policy, int64_t n, const std::string& mode, bool quick) {
  const std::string out = run_child(
      fmt::format("'{}' --checkpoint-row {} {} {}{}", self, policy, n, mode, quick ? " --quick" : ""));
  Row r{policy, mode, n};
  std::sscanf(out.c_str(), "%lf %ld %lf %lf %lf", &r.ms, &r.kept, &r.rss_base, &r.rss_peak, &r.checksum);
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
  const reel::Tape g = gradient_tape(n, parse_policy(policy, n), x0);
  std::optional<reel::CompiledFunction> f;
  std::function<std::vector<Tensor>()> run = [&] { return reel::play(g, {x0}); };
  if (mode == "compiled") {
    f.emplace(reel::compile(g));
    run = [&] { return (*f)({x0}); };
  }
  const double base = current_rss_mb();
  // A first call (the peak RSS is reached there), then the median of the calls in 0.3 s
  // (at least one).
  double checksum = reel::sum(run().at(1)).item();
  std::vector<double> ms;
  const auto start = Clock::now();
  while (ms.empty() || seconds_since(start) < 0.3) {
    const auto t0 = Clock::now();
    const std::vector<Tensor> out = run();
    ms.push_back(seconds_since(t0) * 1e3);
    checksum = reel::sum(out.at(1)).item();
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  fmt::print("{} {} {} {} {:.17g}\n", ms[ms.size() / 2], kept_bytes(g), base, static_cast<double>(u.ru_maxrss) / 1024.0,
             checksum);
  return 0;
}

int checkpoint_table(const std::string& self, bool quick) {
  const std::vector<std::string> policies{"store", "every:100", "sqrt", "binomial:sqrt", "binomial:100"};
  std::vector<int64_t> sizes{1000, 10000, 100000};
  if (!quick) sizes.push_back(1000000);
  fmt::print("Checkpointing: the gradient of an n-step scan, x = sin(x) * 1.01 + square(x) * 0.001 on 8 doubles.\n"
             "kept: the stacks and snapshots the gradient holds for its backward pass (from its tape); RSS: the\n"
             "row process's resident memory before the first gradient and its peak; time: the median gradient\n"
             "call; ratio: to storing everything (same n and mode); grad: agrees with storing everything.\n");
  for (const std::string mode : {"play", "compiled"}) {
    fmt::print("\n{:>8} {:<18} {:>9} {:>10} {:>10} {:>11} {:>6} {:>5}   ({})\n", "n", "policy", "kept", "RSS before",
               "RSS peak", "time", "ratio", "grad", mode == "play" ? "interpreted: reel::play" : "compiled");
    for (int64_t n : sizes) {
      // Rounds over the policies, each row in a fresh process: a slow spell of the machine
      // hits every policy alike; each time is the median of the rounds.
      std::vector<std::vector<Row>> runs(policies.size());
      for (int round = 0; round < (quick ? 1 : 3); ++round)
        for (std::size_t p = 0; p < policies.size(); ++p) runs[p].push_back(run_row(self, policies[p], n, mode, quick));
      std::vector<Row> rows;
      for (std::vector<Row>& r : runs) {
        std::sort(r.begin(), r.end(), [](const Row& a, const Row& b) { return a.ms < b.ms; });
        rows.push_back(r[r.size() / 2]);
      }
      const Row& store = rows[0];
      for (const Row& r : rows) {
        const bool agrees = std::abs(r.checksum - store.checksum) <= 1e-9 * std::max(1.0, std::abs(store.checksum));
        std::string name = r.policy;
        if (name == "sqrt") name = fmt::format("sqrt (every:{})", isqrt_up(n));
        if (name == "binomial:sqrt") name = fmt::format("binomial:{}", isqrt_up(n));
        fmt::print("{:>8} {:<18} {:>9} {:>7.1f} MB {:>7.1f} MB {:>8.1f} ms {:>5.2f}x {:>5}\n", n, name,
                   bytes_str(r.kept), r.rss_base, r.rss_peak, r.ms, r.ms / store.ms, agrees ? "yes" : "NO");
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace bench
