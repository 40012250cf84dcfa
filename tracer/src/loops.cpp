#include "reel/loops.hpp"

#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "reel/ir/builder.hpp"
#include "reel/ir/loop_params.hpp"
#include "reel/ir/prims.hpp"

namespace reel::detail {

Tensor leading_slice(const Tensor& x, int64_t k) {
  if (x.rank() == 0) throw Error(fmt::format("scan: expected xs with a leading axis, got {}", type_str(x.dtype(), x.shape())));
  Tensor out(x.dtype(), Shape(x.shape().begin() + 1, x.shape().end()));
  if (out.nbytes() == 0) return out;
  if (x.shape()[0] == 0) {
    std::memset(out.mutable_raw(), 0, out.nbytes());
    return out;
  }
  std::memcpy(out.mutable_raw(), static_cast<const char*>(x.raw()) + static_cast<std::size_t>(k) * out.nbytes(),
              out.nbytes());
  return out;
}

int64_t scan_length(const char* op, const std::vector<Tensor>& xs, int64_t length) {
  if (xs.empty()) {
    if (length < 0)
      throw Error(fmt::format("{}: expected ScanOptions::length (>= 0) for a scan without xs, got {}", op, length));
    return length;
  }
  for (std::size_t j = 0; j < xs.size(); ++j) {
    if (!xs[j].defined()) throw Error(fmt::format("{}: xs {} is an undefined tensor", op, j + 1));
    if (xs[j].rank() == 0)
      throw Error(fmt::format("{}: xs {} is {}, expected a leading axis to scan over", op, j + 1,
                              type_str(xs[j].dtype(), xs[j].shape())));
  }
  const int64_t n = xs[0].shape()[0];
  for (std::size_t j = 1; j < xs.size(); ++j)
    if (xs[j].shape()[0] != n)
      throw Error(fmt::format("{}: xs {} is {}, expected a leading axis of {} (that of xs 1)", op, j + 1,
                              type_str(xs[j].dtype(), xs[j].shape()), n));
  if (length >= 0 && length != n)
    throw Error(fmt::format("{}: ScanOptions::length is {}, but xs have {} slices", op, length, n));
  return n;
}

int64_t fori_length(int64_t lo, int64_t hi) {
  if (hi <= lo) return 0;
  int64_t n = 0;
  if (__builtin_sub_overflow(hi, lo, &n))
    throw Error(fmt::format("fori_loop: the bounds lo={} and hi={} hold more iterations than an int64 counts "
                            "(expected hi - lo <= {})",
                            lo, hi, std::numeric_limits<int64_t>::max()));
  return n;
}

void undefined_leaf(const char* op, const char* who, const char* what, std::size_t leaf, std::size_t of) {
  throw Error(fmt::format("{}: {} returned an undefined tensor in its {} (leaf {} of {}; expected a tensor in every "
                          "leaf)", op, who, what, leaf, of));
}

int64_t max_trips_of(const WhileOptions& options) {
  return options.max_trips ? checked_max_trips(*options.max_trips, true) : -1;
}

bool while_goes_on(const Tensor& go) {
  if (go.numel() != 1)
    throw Error(fmt::format("while_loop: expected a cond giving one value of one element, got {}",
                            type_str(go.dtype(), go.shape())));
  return static_cast<bool>(go);
}

void check_while_carry(const std::vector<Tensor>& carry, const std::vector<Tensor>& next) {
  std::vector<VarType> entering, leaving;
  for (const Tensor& t : carry) entering.push_back({t.dtype(), t.shape()});
  for (const Tensor& t : next) leaving.push_back({t.dtype(), t.shape()});
  check_carries("while_loop", entering, leaving);
}

namespace {

CheckpointPolicy policy_of(Checkpoint::Kind k) {
  switch (k) {
    case Checkpoint::Kind::none: return CheckpointPolicy::store;
    case Checkpoint::Kind::every: return CheckpointPolicy::every;
    case Checkpoint::Kind::sqrt: return CheckpointPolicy::sqrt;
    case Checkpoint::Kind::binomial: return CheckpointPolicy::binomial;
  }
  return CheckpointPolicy::store;
}

}  // namespace

std::vector<Tensor> run_scan(const Tape& traced, const std::vector<Tensor>& captured,
                             const std::vector<Tensor>& carries, const std::vector<Tensor>& xs, int64_t length,
                             const ScanOptions& options, bool has_index, int64_t index0) {
  // The traced inputs are [counter], carries, slices, captured; a scan's body takes
  // [counter], consts (the captured), carries, slices.
  const std::vector<Var> in = traced.inputs();
  const std::size_t first = has_index ? 1 : 0, K = carries.size(), X = xs.size(), M = captured.size();
  TapeBuilder b;
  std::vector<Var> mapped(in.size(), kNoVar);
  if (has_index) mapped[0] = b.input(traced.type(in[0]));
  for (std::size_t m = 0; m < M; ++m) mapped[first + K + X + m] = b.input(traced.type(in[first + K + X + m]));
  for (std::size_t i = first; i < first + K + X; ++i) mapped[i] = b.input(traced.type(in[i]));
  b.set_outputs(b.inline_tape(traced, mapped));
  ScanParams scan;
  scan.body = std::make_shared<const Tape>(b.finish());
  scan.length = length, scan.C = M, scan.K = K;
  scan.reverse = options.reverse, scan.has_index = has_index, scan.index0 = index0;
  const Checkpoint& c = options.checkpoint;
  scan.policy = policy_of(c.kind);
  if (c.kind == Checkpoint::Kind::every || c.kind == Checkpoint::Kind::binomial ||
      (c.kind != Checkpoint::Kind::none && c.arg != 0))  // (every(0) and binomial(0) then fail naming the 0)
    scan.checkpoint_arg = c.arg;
  std::vector<Tensor> args = captured;
  args.insert(args.end(), carries.begin(), carries.end());
  args.insert(args.end(), xs.begin(), xs.end());
  return apply_results(prims::scan(), args, scan.attrs());
}

namespace {

// A traced cond or body (inputs: the carries, then its captured tensors) as the loop
// takes it: every const of the loop (`consts`, its own from `first`), then the carries.
Tape with_consts(const Traced& traced, std::size_t K, const std::vector<Tensor>& consts, std::size_t first) {
  const std::vector<Var> in = traced.tape.inputs();
  TapeBuilder b;
  std::vector<Var> mapped(in.size(), kNoVar), cs;
  for (const Tensor& t : consts) cs.push_back(b.input({t.dtype(), t.shape()}));
  for (std::size_t i = 0; i < in.size(); ++i) mapped[i] = i < K ? b.input(traced.tape.type(in[i])) : cs[first + i - K];
  b.set_outputs(b.inline_tape(traced.tape, mapped));
  return b.finish();
}

}  // namespace

std::vector<Tensor> run_while(const Traced& cond, const Traced& body, const std::vector<Tensor>& carries,
                              const WhileOptions& options) {
  const int64_t max_trips = max_trips_of(options);
  const std::size_t K = carries.size();
  std::vector<Tensor> args = cond.captured;
  args.insert(args.end(), body.captured.begin(), body.captured.end());
  const std::size_t C = args.size();
  const Tape cond_tape = with_consts(cond, K, args, 0), body_tape = with_consts(body, K, args, cond.captured.size());
  args.insert(args.end(), carries.begin(), carries.end());
  WhileParams loop;
  loop.cond = std::make_shared<const Tape>(cond_tape), loop.body = std::make_shared<const Tape>(body_tape);
  loop.C = C, loop.K = K, loop.max_trips = max_trips;
  // (Where the call is recorded, the primitive records the trip count of this run.)
  return apply_results(prims::while_loop(), args, loop.attrs());
}

}  // namespace reel::detail
