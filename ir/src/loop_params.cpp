// The loop primitives' attributes, read and written (reel/ir/loop_params.hpp).
#include "reel/ir/loop_params.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "reel/ir/primitive.hpp"

namespace reel {

LoopForm loop_form(const Primitive& prim) {
  if (prim.structure != Structure::loop) return LoopForm::none;
  if (prim.name == "scan") return LoopForm::scan;
  if (prim.name == "while_loop") return LoopForm::while_loop;
  return LoopForm::call;
}

std::string_view policy_name(CheckpointPolicy policy) {
  switch (policy) {
    case CheckpointPolicy::store: return "";
    case CheckpointPolicy::every: return "every";
    case CheckpointPolicy::sqrt: return "sqrt";
    case CheckpointPolicy::binomial: return "binomial";
  }
  return "";
}

CheckpointPolicy policy_named(std::string_view name) {
  for (CheckpointPolicy p : {CheckpointPolicy::store, CheckpointPolicy::every, CheckpointPolicy::sqrt,
                             CheckpointPolicy::binomial})
    if (policy_name(p) == name) return p;
  throw Error(fmt::format("scan: expected checkpoint \"\", \"every\", \"sqrt\" or \"binomial\", got \"{}\"", name));
}

TapeRef tape_ref(Tape tape) { return TapeRef{std::make_shared<const Tape>(std::move(tape))}; }

namespace {

std::shared_ptr<const Tape> tape_of(const Attrs& a, const char* name) {
  (void)a.tape(name);  // (its error where the attribute is missing or not a tape)
  return std::get<TapeRef>(a.get(name)).tape;
}

// The checkpoint attributes: "" (store all), "every" with checkpoint_arg k >= 1, "sqrt"
// (k = ceil(sqrt(length))), "binomial" with checkpoint_arg snapshots >= 1.
void read_policy(ScanParams& s, const Attrs& a) {
  const std::string kind = a.has("checkpoint") ? a.string("checkpoint") : "";
  const bool has_arg = a.has("checkpoint_arg");
  const int64_t arg = has_arg ? a.integer("checkpoint_arg") : 0;
  if (has_arg) s.checkpoint_arg = arg;
  auto expect_arg = [&](const char* what) {
    if (!has_arg || arg < 1)
      throw Error(fmt::format("scan: checkpoint=\"{}\" expects checkpoint_arg {} >= 1, got {}", kind, what,
                              has_arg ? std::to_string(arg) : "none"));
  };
  s.policy = policy_named(kind);
  switch (s.policy) {
    case CheckpointPolicy::store:
      if (has_arg) throw Error(fmt::format("scan: checkpoint_arg {} given without a checkpoint policy", arg));
      break;
    case CheckpointPolicy::every:
      expect_arg("(the segment length k of Checkpoint::every(k))");
      s.segment = arg;
      break;
    case CheckpointPolicy::sqrt: {
      if (has_arg) throw Error(fmt::format("scan: checkpoint=\"sqrt\" takes no checkpoint_arg, got {}", arg));
      int64_t k = std::max<int64_t>(1, static_cast<int64_t>(std::sqrt(static_cast<double>(s.length))));
      while (k * k < s.length) ++k;  // ceil(sqrt(length)), exactly
      s.segment = k;
      break;
    }
    case CheckpointPolicy::binomial:
      expect_arg("(the snapshots of Checkpoint::binomial(snapshots))");
      s.snapshots = arg;
      break;
  }
}

}  // namespace

ScanParams ScanParams::read(const Attrs& a, std::size_t nargs) {
  ScanParams s;
  s.body = tape_of(a, "body");
  s.length = a.integer("length");
  const int64_t C = a.integer("num_consts"), K = a.integer("num_carry");
  if (s.length < 0) throw Error(fmt::format("scan: expected a length >= 0, got {}", s.length));
  if (C < 0 || K < 0 || static_cast<std::size_t>(C + K) > nargs)
    throw Error(fmt::format("scan: num_consts {} and num_carry {} do not fit the {} arguments", C, K, nargs));
  s.C = static_cast<std::size_t>(C), s.K = static_cast<std::size_t>(K), s.X = nargs - s.C - s.K;
  s.reverse = a.has("reverse") && a.boolean("reverse");
  s.has_index = a.has("index");
  if (s.has_index) s.index0 = a.integer("index");
  // The counter runs index .. index + length - 1, which must not pass the largest i64.
  if (s.has_index && s.length > 0 && s.index0 > std::numeric_limits<int64_t>::max() - (s.length - 1))
    throw Error(fmt::format("scan: the counter from index={} over length={} passes the largest i64 (expected index + "
                            "length - 1 <= {})",
                            s.index0, s.length, std::numeric_limits<int64_t>::max()));
  if (s.body->outputs.size() < s.K || s.body->outputs.empty())
    throw Error(fmt::format("scan: expected a body with at least {} output{} ({} carries), got {}",
                            std::max<std::size_t>(s.K, 1), std::max<std::size_t>(s.K, 1) == 1 ? "" : "s", s.K,
                            s.body->outputs.size()));
  s.Y = s.body->outputs.size() - s.K;
  read_policy(s, a);
  return s;
}

Attrs ScanParams::attrs(Attrs base) const {
  base.set("body", TapeRef{body});
  base.set("length", length);
  base.set("num_consts", static_cast<int64_t>(C));
  base.set("num_carry", static_cast<int64_t>(K));
  if (reverse || base.has("reverse")) base.set("reverse", reverse);
  if (has_index) base.set("index", index0);
  if (policy != CheckpointPolicy::store) base.set("checkpoint", std::string(policy_name(policy)));
  if (checkpoint_arg) base.set("checkpoint_arg", *checkpoint_arg);
  return base;
}

int64_t checked_max_trips(int64_t max_trips, bool option) {
  if (max_trips < 0)
    throw Error(fmt::format("while_loop: expected max_trips >= 0{}, got {}", option ? " (or none, for no limit)" : "",
                            max_trips));
  return max_trips;
}

void check_carries(std::string_view loop, std::span<const VarType> entering, std::span<const VarType> leaving) {
  for (std::size_t c = 0; c < entering.size(); ++c)
    if (leaving[c] != entering[c])
      throw Error(fmt::format("{}: carry {} enters the body as {} and leaves it as {}", loop, c + 1,
                              type_str(entering[c]), type_str(leaving[c])));
}

WhileParams WhileParams::read(const Attrs& a, std::size_t nargs) {
  WhileParams w;
  w.cond = tape_of(a, "cond");
  w.body = tape_of(a, "body");
  const int64_t C = a.integer("num_consts");
  if (C < 0 || static_cast<std::size_t>(C) >= nargs)
    throw Error(fmt::format("while_loop: expected num_consts in [0, {}) (at least one of the {} arguments a carry), "
                            "got {}", nargs, nargs, C));
  w.C = static_cast<std::size_t>(C), w.K = nargs - w.C;
  w.has_trips = a.has("trips");
  if (w.has_trips) w.trips = a.integer("trips");
  if (w.trips < 0) throw Error(fmt::format("while_loop: expected trips >= 0, got {}", w.trips));
  if (a.has("max_trips")) {
    w.max_trips = checked_max_trips(a.integer("max_trips"));
    if (w.has_trips && w.trips > w.max_trips)
      throw Error(fmt::format("while_loop: expected trips <= max_trips, got trips={} and max_trips={}", w.trips,
                              w.max_trips));
  }
  return w;
}

Attrs WhileParams::attrs(Attrs base) const {
  base.set("cond", TapeRef{cond});
  base.set("body", TapeRef{body});
  base.set("num_consts", static_cast<int64_t>(C));
  if (has_trips) base.set("trips", trips);
  if (max_trips >= 0) base.set("max_trips", max_trips);
  return base;
}

RevolveParams RevolveParams::read(const Attrs& a, std::size_t nargs) {
  RevolveParams L;
  L.forward = tape_of(a, "forward"), L.advance = tape_of(a, "advance"), L.backward = tape_of(a, "backward");
  auto count = [&](const char* name) {
    const int64_t v = a.integer(name);
    if (v < 0) throw Error(fmt::format("revolve: expected {} >= 0, got {}", name, v));
    return static_cast<std::size_t>(v);
  };
  L.length = a.integer("length"), L.snapshots = a.integer("snapshots");
  if (L.length < 0) throw Error(fmt::format("revolve: expected a length >= 0, got {}", L.length));
  if (L.snapshots < 1) throw Error(fmt::format("revolve: expected snapshots >= 1, got {}", L.snapshots));
  L.C = count("num_consts"), L.K = count("num_carry"), L.Y = count("num_ys");
  L.BC = count("num_bwd_consts"), L.BK = count("num_bwd_carry");
  L.reverse = a.has("reverse") && a.boolean("reverse");
  L.has_index = a.has("index");
  if (L.has_index) L.index0 = a.integer("index");
  const std::size_t fin = L.forward->inputs().size(), fout = L.forward->outputs.size();
  const std::size_t bin = L.backward->inputs().size(), bout = L.backward->outputs.size();
  if (fin < L.counter() + L.C + L.K || fout < L.K + L.Y)
    throw Error(fmt::format("revolve: expected a forward body with at least {} inputs and {} outputs, got {} and {}",
                            L.counter() + L.C + L.K, L.K + L.Y, fin, fout));
  L.X = fin - L.counter() - L.C - L.K, L.R = fout - L.K - L.Y;
  if (bin < L.counter() + L.BC + L.BK + L.R || bout < L.BK)
    throw Error(fmt::format("revolve: expected a backward body with at least {} inputs and {} outputs, got {} and {}",
                            L.counter() + L.BC + L.BK + L.R, L.BK, bin, bout));
  L.BX = bin - L.counter() - L.BC - L.BK - L.R;
  if (nargs != L.nargs())
    throw Error(fmt::format("revolve: expected {} arguments for its bodies, got {}", L.nargs(), nargs));
  return L;
}

Attrs RevolveParams::attrs(Attrs base) const {
  base.set("forward", TapeRef{forward});
  base.set("advance", TapeRef{advance});
  base.set("backward", TapeRef{backward});
  base.set("length", length);
  base.set("num_consts", static_cast<int64_t>(C));
  base.set("num_carry", static_cast<int64_t>(K));
  base.set("num_ys", static_cast<int64_t>(Y));
  base.set("num_bwd_consts", static_cast<int64_t>(BC));
  base.set("num_bwd_carry", static_cast<int64_t>(BK));
  base.set("snapshots", snapshots);
  if (reverse || base.has("reverse")) base.set("reverse", reverse);
  if (has_index) base.set("index", index0);
  return base;
}

CallParams CallParams::read(const Attrs& a) { return CallParams{tape_of(a, "body")}; }

Attrs CallParams::attrs(Attrs base) const {
  base.set("body", TapeRef{body});
  return base;
}

}  // namespace reel
