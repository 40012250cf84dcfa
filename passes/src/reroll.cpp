// reroll: folds long runs of structurally identical segments of a tape (what a plain
// C++ `for` loop records when it is traced) into one `scan` each, so that a traced
// loop is differentiated, planned and compiled once per body, not once per iteration.
//
// 1. Candidates. Every operation gets a structural key K0 (kind, primitive, attributes,
//    type, arity; a slice's start is left out, see 3), and a context key that adds its
//    arguments' K0 and their distance (capped). The distance from an operation to the
//    previous one with the same context key is a candidate period P; around it, the
//    maximal run where K0[i] == K0[i - P] is computed once per (P, run), so the work is
//    about linear in the tape. Runs of at least min_repeats periods and min_ops
//    operations are candidates, the ones covering most operations first.
// 2. Verification, op by op: with iteration k at start + kP, each argument slot of the
//    body is classified from iteration 1 as internal (the same iteration), carry (the
//    previous iteration's value at some position; in iteration 0 a value before the
//    region, the carry's initial value), invariant (the same variable before the region
//    in every iteration: a scan const) or constant (a constant operation outside the
//    iteration: equal values stay in the body, differing ones are stacked into an xs).
//    Each later iteration must agree; the first that does not (another operation,
//    other attributes, a dependency two iterations back, ...) ends the loop, and what
//    is consistent and long enough is folded. When period P fails, multiples of P are
//    tried (a body made of two halves that differ only in which invariant they read).
// 3. A slice of a loop-invariant value along its leading axis whose start advances by a
//    constant step each iteration (`reel::index(sequence, t)`) is an xs: the body gets
//    one slice of the slices taken at once before the loop.
// 4. Values of the loop read after it: the last iteration's values are final carries
//    (a value that is not a carry gets a carry of its own, starting from zeros); a
//    value of an earlier iteration makes its position a stacked ys, which later
//    readers slice. The body is re-rolled too (nested loops) and cleaned up.
// 5. Before that, a body's scalars of one dtype are packed into one vector per kind of
//    input (consts, carries other than reductions' accumulators, xs) when there are
//    at least kMinPacked of them: a loop over time steps whose state is an array of
//    scalars (ode's y[i], lstm's hidden units) carries one vector, and its inner loops
//    over the elements read advancing slices of it and fold in the nested re-roll.
//    Advancing slices of one variable that move by the same step and fit in one step's
//    rows share one xs (lstm's sequence[t * b + i]).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "reel/ir/builder.hpp"
#include "reel/ir/loop_params.hpp"
#include "reel/ir/prims.hpp"
#include "reel/passes.hpp"
#include "reroll_keys.hpp"
#include "reroll_loop.hpp"
#include "vectorize.hpp"

namespace reel {

namespace {

using reroll_detail::AttrHasher;
using reroll_detail::Cls;
using reroll_detail::kNone;
using reroll_detail::Loop;
using reroll_detail::Slot;
using reroll_detail::Steady;
using reroll_detail::LastSeen;
using reroll_detail::mix;

// Arguments farther back than this count as "far" in the context key: a body's carries
// and internal values are near and at fixed distances, invariants are far.
constexpr int64_t kNear = 4096;
// The most multiples of a candidate period tried when the period itself fails.
constexpr int kMaxMultiple = 16;
// The most rounds of folding: a round can fold a loop over the values an earlier round's
// loops stacked (a chain of loops, each reading the last one's results).
constexpr int kMaxRounds = 16;
// The fewest scalars of a loop body's consts, carries or xs packed into one vector.
constexpr std::size_t kMinPacked = 8;

class Reroller {
 public:
  Reroller(const Tape& tape, const RerollOptions& options)
      : t_(tape), o_(options), n_(tape.size()), slice_(&prims::slice()) {
    o_.min_repeats = std::max<int64_t>(o_.min_repeats, 3);
    o_.max_period = std::max<int64_t>(o_.max_period, 1);
  }

  // The tape with its loops folded, or nothing if it has none.
  std::optional<Tape> run() {
    check_structure("reroll", t_);
    keys();
    is_output_.assign(static_cast<std::size_t>(n_) + 1, false);
    for (Var o : t_.outputs) is_output_[static_cast<std::size_t>(o)] = true;
    std::vector<Loop> loops = find_loops();
    if (loops.empty()) return std::nullopt;
    return emit(loops);
  }

 private:
  const Op& op(Var v) const { return t_.ops[static_cast<std::size_t>(v - 1)]; }
  bool is_slice(const Op& o) const { return o.kind == OpKind::call && o.prim == slice_; }
  static int64_t step_of(const Op& o) { return o.attrs.has("step") ? o.attrs.integer("step") : 1; }

  // One walk over the tape: K0 (what must be equal at the same position of every
  // iteration), each variable's last reader, and each operation's candidate period: the
  // distance to the previous operation with the same context key (its K0, its
  // arguments' K0 and how far back they are, up to kNear).
  void keys() {
    k0_.assign(static_cast<std::size_t>(n_) + 1, 0);
    start_at_.assign(static_cast<std::size_t>(n_) + 1, kNone);
    slice_at_.clear();
    last_use_.assign(static_cast<std::size_t>(n_) + 1, kNoVar);
    period_.assign(static_cast<std::size_t>(n_) + 1, 0);
    LastSeen last;
    for (Var v = 1; v <= n_; ++v) {
      const Op& o = op(v);
      uint64_t h = static_cast<uint64_t>(o.kind) + 1;
      mix(h, static_cast<uint64_t>(o.type.dtype));
      for (int64_t d : o.type.shape) mix(h, static_cast<uint64_t>(d));
      mix(h, o.type.shape.size());
      switch (o.kind) {
        case OpKind::input: mix(h, static_cast<uint64_t>(v)); break;  // never repeats
        case OpKind::constant: break;                                  // values: see Cls::constant
        case OpKind::result: mix(h, static_cast<uint64_t>(o.index)); break;
        case OpKind::call:
          mix(h, reinterpret_cast<uintptr_t>(o.prim));
          mix(h, o.args.size());
          mix(h, static_cast<uint64_t>(o.results));
          if (is_slice(o)) {  // the start may advance (an xs); the width may not
            slice_at_.push_back(v);
            start_at_[static_cast<std::size_t>(v)] = o.attrs.integer("start");
            mix(h, static_cast<uint64_t>(o.attrs.integer("axis")));
            mix(h, static_cast<uint64_t>(step_of(o)));
            mix(h, static_cast<uint64_t>(o.attrs.integer("stop") - o.attrs.integer("start")));
          } else {
            for (const auto& [name, value] : o.attrs.items()) {
              mix(h, std::hash<std::string_view>()(name));
              mix(h, attr_hash_.value(value));
            }
          }
          break;
      }
      k0_[static_cast<std::size_t>(v)] = h;
      for (Var a : o.args) {
        last_use_[static_cast<std::size_t>(a)] = v;
        mix(h, k0(a));
        mix(h, static_cast<uint64_t>(std::min<int64_t>(v - a, kNear + 1)));
      }
      if (const Var prev = last.exchange(h, v); prev != kNoVar && v - prev <= o_.max_period)
        period_[static_cast<std::size_t>(v)] = v - prev;
    }
  }
  uint64_t k0(Var v) const { return k0_[static_cast<std::size_t>(v)]; }
  // A slice's start, recorded by keys() (kNone for other operations).
  int64_t start_at(int64_t v) const { return start_at_[static_cast<std::size_t>(v)]; }

  // Whether a and b (K0-equal) are the same operation but for their arguments (and a
  // slice's start).
  bool like(const Op& a, const Op& b) const {
    if (a.kind != b.kind || a.type != b.type || a.args.size() != b.args.size()) return false;
    if (a.kind == OpKind::result) return a.index == b.index;
    if (a.kind != OpKind::call) return true;
    if (a.prim != b.prim || a.results != b.results) return false;
    if (!is_slice(a)) return a.attrs == b.attrs;
    return a.attrs.integer("axis") == b.attrs.integer("axis") && step_of(a) == step_of(b) &&
           a.attrs.integer("stop") - a.attrs.integer("start") == b.attrs.integer("stop") - b.attrs.integer("start");
  }

  // ---- 1. candidates ----
  struct Run {
    Var s, e;  // the repeating region [s, e)
    int32_t P;
  };

  std::vector<Run> candidates() const {
    std::vector<Run> runs;
    std::unordered_map<int32_t, Var> run_end;  // per period: the end of the last run computed
    // A budget for K0 comparisons, so that an adversarial tape costs O(n) too.
    int64_t budget = 64 * static_cast<int64_t>(n_) + 100'000;
    auto match = [&](Var i, int32_t P) { return i - P >= 1 && i <= n_ && k0(i) == k0(i - P); };
    for (Var v = 1; v <= n_ && budget > 0; ++v) {
      const int32_t P = period_[static_cast<std::size_t>(v)];
      if (P == 0) continue;
      Var& end = run_end[P];
      if (v < end) continue;  // inside a run of P already found
      Var a = v, b = v;
      while (match(a - 1, P)) --a;
      while (match(b, P)) ++b;
      budget -= (b - a) + 2;
      end = b;
      const Run r{a - P, b, P};
      if ((r.e - r.s) / P >= o_.min_repeats && r.e - r.s >= o_.min_ops) runs.push_back(r);
    }
    return runs;
  }

  // ---- 2. verification ----

  // Classifies the slots from iteration 1 of a loop of period P at pos; false if this
  // cannot be a body (a result operation apart from its call).
  bool classify(Var pos, int32_t P, Steady& st) const {
    st.first.clear(), st.slots.clear(), st.start1.assign(static_cast<std::size_t>(P), kNone);
    st.delta.assign(static_cast<std::size_t>(P), kNone);
    const Var base = pos + P;
    for (int32_t j = 0; j < P; ++j) {
      const Op& o = op(base + j);
      st.first.push_back(static_cast<int32_t>(st.slots.size()));
      for (Var a : o.args) {
        if (a >= base) st.slots.push_back({Cls::internal, a - base});
        else if (op(a).kind == OpKind::constant) st.slots.push_back({Cls::constant, kNoVar});
        else if (a >= pos) st.slots.push_back({Cls::carry, a - pos});
        else st.slots.push_back({Cls::invariant, a});
      }
      if (o.kind == OpKind::result && st.slots.back().cls != Cls::internal) return false;
      if (is_slice(o)) st.start1[static_cast<std::size_t>(j)] = start_at(base + j);
    }
    st.first.push_back(static_cast<int32_t>(st.slots.size()));
    return true;
  }

  // Whether a slice advancing by `delta` per iteration can be an xs: along the leading
  // axis, unit step, of a loop invariant, its width at most the step.
  bool advancing_slice_ok(const Op& o, const Slot& arg, int64_t delta) const {
    const int64_t w = o.attrs.integer("stop") - o.attrs.integer("start");
    return o.attrs.integer("axis") == 0 && step_of(o) == 1 && arg.cls == Cls::invariant && w > 0 && w <= delta;
  }

  // Whether the argument `a` of iteration k (at base) agrees with slot s; `ref` is the
  // same argument in iteration 1. Iteration 0 (k == 0) may read a value before the
  // loop where later ones read a carry (its initial value).
  bool slot_ok(const Slot& s, Var a, Var ref, Var base, int32_t P, int64_t k) const {
    switch (s.cls) {
      case Cls::internal: return a == base + s.x;
      case Cls::carry: return k == 0 ? a < base && op(a).type == op(base + s.x).type : a == base - P + s.x;
      case Cls::invariant: return a == s.x;
      case Cls::constant: return a < base && op(a).kind == OpKind::constant && op(a).type == op(ref).type;
    }
    return false;
  }

  // Whether iteration k of the loop at pos agrees with iteration 1 (k == 2 also fixes
  // the advancing slices' steps).
  bool iteration_ok(Var pos, int32_t P, int64_t k, Steady& st) const {
    const Var base = pos + static_cast<Var>(k * P), ref = pos + P;
    for (int32_t j = 0; j < P; ++j) {
      const Var v = base + j, r = ref + j;
      if (k0(v) != k0(r)) return false;
      const Op& o = op(v);
      const Op& ro = op(r);
      if (!like(o, ro)) return false;
      const int32_t first = st.first[static_cast<std::size_t>(j)];
      for (std::size_t m = 0; m < o.args.size(); ++m)
        if (!slot_ok(st.slots[static_cast<std::size_t>(first) + m], o.args[m], ro.args[m], base, P, k)) return false;
      const auto J = static_cast<std::size_t>(j);
      if (st.start1[J] == kNone) continue;
      const int64_t start = start_at(v);
      if (k == 2 && st.delta[J] == kNone) {
        st.delta[J] = start - st.start1[J];
        if (st.delta[J] != 0 && !advancing_slice_ok(o, st.slots[static_cast<std::size_t>(first)], st.delta[J]))
          return false;
      }
      if (start != st.start1[J] + (k - 1) * st.delta[J]) return false;
      // A slice advancing by delta > its width: the next delta rows must exist too.
      if (st.delta[J] != 0 && start + st.delta[J] > op(o.args[0]).type.shape[0]) return false;
    }
    return true;
  }

  // Whether verify(s, e, Q) may find a loop, as far as slices tell: if a body has a
  // slice (every window of Q operations of a candidate run has the same ones), a loop
  // found has at least min_repeats iterations, whose iterations 1 to min_repeats - 1 read
  // slices advancing by one step (iteration_ok), so some slice v in [s, e) starts
  // min_repeats - 1 slices v, v + Q, v + 2Q, ... whose starts advance by one step. A
  // chain reading scattered elements (no loop) is turned down without looking at its
  // operations, for each of the 16 multiples of its period.
  bool slices_may_advance(Var s, Var e, int32_t Q) const {
    const int64_t points = o_.min_repeats - 1;
    if (points < 3) return true;  // (two starts always make a step)
    auto it = std::lower_bound(slice_at_.begin(), slice_at_.end(), s);
    if (it == slice_at_.end() || *it >= s + Q) return true;  // no slice in the body
    for (; it != slice_at_.end() && *it + (points - 1) * Q < e; ++it) {
      const int64_t v = *it;
      if (start_at(v + Q) == kNone) continue;
      const int64_t step = start_at(v + Q) - start_at(v);
      int64_t j = 2;
      while (j < points && start_at(v + j * Q) != kNone && start_at(v + j * Q) - start_at(v + (j - 1) * Q) == step) ++j;
      if (j == points) return true;
    }
    return false;
  }

  struct Found {
    Var start;
    int64_t R;
    Steady st;
  };

  // Consistent loops of period P in [s, e).
  std::vector<Found> verify(Var s, Var e, int32_t P) const {
    std::vector<Found> out;
    Var pos = s;
    Steady st;
    while ((e - pos) / P >= o_.min_repeats) {
      if (op(pos).kind == OpKind::result) {  // a body starts with a call, not with its results
        ++pos;
        continue;
      }
      if (!classify(pos, P, st)) {
        pos += P;
        continue;
      }
      int64_t k = 2;  // iterations 1 .. k-1 agree
      while (pos + (k + 1) * P <= e && iteration_ok(pos, P, k, st)) ++k;
      if (k >= o_.min_repeats) {
        Var start = pos;
        int64_t R = k;
        if (!iteration_ok(pos, P, 0, st)) {  // iteration 1 is the first: the slices start one step on
          start += P, --R;
          for (std::size_t j = 0; j < st.start1.size(); ++j)
            if (st.start1[j] != kNone) st.start1[j] += st.delta[j];
        }
        if (R >= o_.min_repeats && R * P >= o_.min_ops) out.push_back({start, R, st});
      }
      pos += static_cast<Var>(k * P);
    }
    return out;
  }

  std::vector<Loop> find_loops() {
    std::vector<Run> runs = candidates();
    std::stable_sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.e - a.s > b.e - b.s; });
    std::map<Var, Var> taken;  // accepted loops: start -> end
    std::vector<Loop> loops;
    for (const Run& r : runs) {
      // The parts of the run no accepted loop covers.
      std::vector<std::pair<Var, Var>> gaps;
      Var from = r.s;
      auto it = taken.upper_bound(r.s);
      if (it != taken.begin() && std::prev(it)->second > from) from = std::prev(it)->second;
      for (; from < r.e; ++it) {
        const Var to = it == taken.end() ? r.e : std::min(r.e, it->first);
        if (to > from) gaps.emplace_back(from, to);
        if (it == taken.end()) break;
        from = std::max(from, it->second);
      }
      for (auto [gs, ge] : gaps) {
        for (int m = 1; m <= kMaxMultiple; ++m) {
          const int64_t P = static_cast<int64_t>(m) * r.P;
          if (P > o_.max_period || (ge - gs) / P < o_.min_repeats) break;
          if (!slices_may_advance(gs, ge, static_cast<int32_t>(P))) continue;
          const auto found = verify(gs, ge, static_cast<int32_t>(P));
          for (const Found& f : found) {
            Loop loop = analyze(f, static_cast<int32_t>(P));
            if (loop.R == 0) continue;
            taken.emplace(loop.start, loop.end());
            loops.push_back(std::move(loop));
          }
          if (!found.empty()) break;
        }
      }
    }
    std::sort(loops.begin(), loops.end(), [](const Loop& a, const Loop& b) { return a.start < b.start; });
    return loops;
  }

  // ---- 3, 4. what the scan takes and gives ----

  bool same_value(Var a, Var b) const {
    const Tensor& x = op(a).value;
    const Tensor& y = op(b).value;
    return x.raw() == y.raw() || std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
  }

  // The loop at start, or one with R == 0 if it is not worth a scan (nothing of it is
  // read after it).
  Loop analyze(const Found& f, int32_t P) {
    Loop L;
    L.start = f.start, L.P = P, L.R = f.R, L.st = f.st;
    const Var start = L.start;
    const int64_t R = L.R;
    const Steady& st = L.st;
    const auto nslots = st.slots.size();
    L.slot_id.assign(nslots, -1);
    L.pos_id.assign(static_cast<std::size_t>(P), -1);
    L.pos_offset.assign(static_cast<std::size_t>(P), 0);
    // Advancing slices of one variable that move by the same step and all fall within
    // one step's rows share one xs (lstm's sequence[t * b + i] for each i): the body
    // reads each at its offset in the row, so a loop over i inside it reads advancing
    // slices and folds too.
    std::map<std::pair<Var, int64_t>, std::pair<int64_t, int64_t>> span;  // (source, step) -> [first, last)
    auto advancing = [&](std::size_t J) { return st.start1[J] != kNone && st.delta[J] != 0; };
    auto start_of = [&](int32_t j) { return start_at(start + j); };
    for (int32_t j = 0; j < P; ++j) {
      const auto J = static_cast<std::size_t>(j);
      if (!advancing(J)) continue;
      const Op& o = op(start + j);
      auto [it, added] = span.try_emplace({o.args[0], st.delta[J]}, start_of(j), start_of(j) + o.type.shape[0]);
      it->second.first = std::min(it->second.first, start_of(j));
      it->second.second = std::max(it->second.second, start_of(j) + o.type.shape[0]);
    }
    std::map<std::pair<Var, int64_t>, int32_t> shared;  // (source, step) -> the xs all its slices read
    // Each iteration's argument of slot q of position j.
    auto arg = [&](int32_t j, std::size_t q, int64_t k) {
      return op(start + static_cast<Var>(k * P) + j).args[q - static_cast<std::size_t>(st.first[static_cast<std::size_t>(j)])];
    };
    std::map<Var, int32_t> const_of;
    std::map<std::pair<int32_t, Var>, int32_t> carry_of;
    for (int32_t j = 0; j < P; ++j) {
      const auto J = static_cast<std::size_t>(j);
      const Op& o0 = op(start + j);
      bool varies = false;
      if (o0.kind == OpKind::constant)
        for (int64_t k = 1; k < R && !varies; ++k) varies = !same_value(start + j, start + static_cast<Var>(k * P) + j);
      if (varies || advancing(J)) {
        if (varies) {
          L.pos_id[J] = static_cast<int32_t>(L.xs.size());
          L.xs.push_back({j, -1});
          continue;
        }
        const std::pair<Var, int64_t> key{o0.args[0], st.delta[J]};
        const auto [first, last] = span.at(key);
        if (last - first > st.delta[J]) {  // more than a step's rows: an xs of its own
          L.pos_id[J] = static_cast<int32_t>(L.xs.size());
          L.xs.push_back({j, -1, start_of(j)});
          continue;
        }
        auto [it, added] = shared.try_emplace(key, static_cast<int32_t>(L.xs.size()));
        if (added) L.xs.push_back({j, -1, first});
        L.pos_id[J] = it->second;
        L.pos_offset[J] = start_of(j) - first;
        continue;
      }
      for (auto q = static_cast<std::size_t>(st.first[J]); q < static_cast<std::size_t>(st.first[J + 1]); ++q) {
        const Slot& s = st.slots[q];
        if (s.cls == Cls::invariant) {
          auto [it, added] = const_of.try_emplace(s.x, static_cast<int32_t>(L.consts.size()));
          if (added) L.consts.push_back(s.x);
          L.slot_id[q] = it->second;
        } else if (s.cls == Cls::carry) {
          const Var init = arg(j, q, 0);  // iteration 0's argument: the initial value
          auto [it, added] = carry_of.try_emplace({s.x, init}, static_cast<int32_t>(L.carries.size()));
          if (added) L.carries.emplace_back(s.x, init);
          L.slot_id[q] = it->second;
        } else if (s.cls == Cls::constant) {
          bool differ = false;
          for (int64_t k = 1; k < R && !differ; ++k) differ = !same_value(arg(j, q, 0), arg(j, q, k));
          if (differ) {
            L.slot_id[q] = static_cast<int32_t>(L.xs.size());
            L.xs.push_back({j, static_cast<int32_t>(q)});
          }
        }
      }
    }
    // Values read after the loop.
    const Var end = L.end();
    std::vector<bool> is_carry_source(static_cast<std::size_t>(P), false), last_read(static_cast<std::size_t>(P), false),
        earlier_read(static_cast<std::size_t>(P), false);
    for (const auto& c : L.carries) is_carry_source[static_cast<std::size_t>(c.first)] = true;
    for (int64_t k = 0; k < R; ++k)
      for (int32_t j = 0; j < P; ++j) {
        const Var v = start + static_cast<Var>(k * P) + j;
        if (last_use_[static_cast<std::size_t>(v)] < end && !is_output_[static_cast<std::size_t>(v)]) continue;
        L.reads.emplace_back(v, k);
        (k == R - 1 ? last_read : earlier_read)[static_cast<std::size_t>(j)] = true;
      }
    for (int32_t j = 0; j < P; ++j) {
      const auto J = static_cast<std::size_t>(j);
      if (earlier_read[J]) L.ys.push_back(j);
      else if (last_read[J] && !is_carry_source[J]) L.final_only.push_back(j);
    }
    // Nothing read after it: leave it (dead code elimination drops it; if it checks
    // guards, they stay unrolled, since an unused scan would not keep them).
    // (A scan takes at least one argument: a loop of constants alone stays too.)
    if (L.reads.empty() || L.consts.size() + L.carries.size() + L.final_only.size() + L.xs.size() == 0) L.R = 0;
    return L;
  }

  Tape body(const Loop& L) const {
    const Steady& st = L.st;
    TapeBuilder b;
    std::vector<Var> cin, kin, xin;
    for (Var u : L.consts) cin.push_back(b.input(op(u).type));
    for (const auto& c : L.carries) kin.push_back(b.input(op(c.second).type));
    for (int32_t j : L.final_only) kin.push_back(b.input(op(L.start + j).type));
    for (const Loop::Xs& x : L.xs) {
      const Op& o = op(L.start + x.j);
      if (x.slot >= 0) {
        xin.push_back(b.input(op(o.args[static_cast<std::size_t>(x.slot - st.first[static_cast<std::size_t>(x.j)])]).type));
      } else if (is_slice(o)) {
        VarType t = o.type;
        t.shape[0] = st.delta[static_cast<std::size_t>(x.j)];
        xin.push_back(b.input(t));
      } else {
        xin.push_back(b.input(o.type));
      }
    }
    std::vector<Var> at(static_cast<std::size_t>(L.P), kNoVar);
    for (int32_t j = 0; j < L.P; ++j) {
      const auto J = static_cast<std::size_t>(j);
      const Op& o = op(L.start + j);
      if (const int32_t id = L.pos_id[J]; id >= 0) {
        const Var in = xin[static_cast<std::size_t>(id)];
        at[J] = in;
        if (const int64_t off = L.pos_offset[J]; is_slice(o) && (b.type(in) != o.type || off != 0))  // its rows of the step's
          at[J] = b.call(*slice_, {in}, {{"axis", int64_t{0}}, {"start", off}, {"stop", off + o.type.shape[0]},
                                         {"step", int64_t{1}}});
        continue;
      }
      if (o.kind == OpKind::constant) {
        at[J] = b.constant(o.value);
        continue;
      }
      std::vector<Var> args;
      for (std::size_t m = 0; m < o.args.size(); ++m) {
        const auto q = static_cast<std::size_t>(st.first[J]) + m;
        const Slot& s = st.slots[q];
        const auto id = static_cast<std::size_t>(L.slot_id[q]);
        switch (s.cls) {
          case Cls::internal: args.push_back(at[static_cast<std::size_t>(s.x)]); break;
          case Cls::carry: args.push_back(kin[id]); break;
          case Cls::invariant: args.push_back(cin[id]); break;
          case Cls::constant: args.push_back(L.slot_id[q] >= 0 ? xin[id] : b.constant(op(o.args[m]).value)); break;
        }
      }
      at[J] = b.copy(o, std::move(args));
    }
    std::vector<Var> outs;
    for (const auto& c : L.carries) outs.push_back(at[static_cast<std::size_t>(c.first)]);
    for (int32_t j : L.final_only) outs.push_back(at[static_cast<std::size_t>(j)]);
    for (int32_t j : L.ys) outs.push_back(at[static_cast<std::size_t>(j)]);
    b.set_outputs(std::move(outs));
    return b.finish();
  }

  // Scalars of one dtype that a body reads in many places become one vector: a loop
  // over the steps of a simulation that keeps each element of its state in a scalar
  // (ode's y[i], lstm's hidden units) carries one vector, and the values it reads per
  // step (lstm's input sequence, stacked constants) come as one row, so the loops over
  // their elements inside the body read advancing slices and fold too. Per group of the
  // body's inputs (consts, carries, xs), the indices (into L.consts, L.carries, L.xs)
  // packed into its vector, or none when fewer than kMinPacked.
  struct Packing {
    std::vector<std::size_t> group[3];
    bool any() const { return !group[0].empty() || !group[1].empty() || !group[2].empty(); }
  };

  // Where each group of a body's inputs starts (the final-only carries come between the
  // carries and the xs) and how many it has.
  struct InputGroups {
    std::size_t first[3], count[3];
  };
  static InputGroups input_groups(const Loop& L) {
    return {{0, L.consts.size(), L.consts.size() + L.carries.size() + L.final_only.size()},
            {L.consts.size(), L.carries.size(), L.xs.size()}};
  }

  // A carry that is a reduction's accumulator (read once, by the operation that gives
  // its next value, one vectorize reduces) stays apart, for `vectorize`.
  Packing packable(const Tape& body, const Loop& L) const {
    const std::vector<Var> in = body.inputs();
    std::vector<int> reads(static_cast<std::size_t>(body.size()) + 1, 0);
    for (const Op& o : body.ops)
      for (Var a : o.args) ++reads[static_cast<std::size_t>(a)];
    const auto [first, count] = input_groups(L);
    Packing pk;
    for (int g = 0; g < 3; ++g) {
      // The dtype with the most scalars in the group (f64 on a tie).
      int64_t f32s = 0, f64s = 0;
      for (std::size_t i = 0; i < count[g]; ++i) {
        const VarType& t = body.type(in[first[g] + i]);
        f32s += t.shape.empty() && t.dtype == DType::f32;
        f64s += t.shape.empty() && t.dtype == DType::f64;
      }
      const DType dtype = f32s > f64s ? DType::f32 : DType::f64;
      std::vector<std::size_t>& packed = pk.group[g];
      for (std::size_t i = 0; i < count[g]; ++i) {
        const Var c = in[first[g] + i];
        const VarType& t = body.type(c);
        if (!t.shape.empty() || t.dtype != dtype) continue;
        if (g == 1) {
          const Op& n = body.op(body.outputs[i]);
          const bool accumulates = reads[static_cast<std::size_t>(c)] == 1 && n.kind == OpKind::call &&
                                   n.args.size() == 2 && (n.args[0] == c || n.args[1] == c) && detail::reduces(*n.prim);
          if (accumulates) continue;
        }
        packed.push_back(i);
      }
      if (packed.size() < kMinPacked) packed.clear();
    }
    return pk;
  }

  // L's body with the inputs of `pk` packed: in each group, the inputs not packed, then
  // the group's vector (the carries' before the final-only ones). Each packed input is
  // read as its element of the vector, and the next carry vector is the packed carries'
  // next values, concatenated.
  Tape pack(const Tape& body, const Loop& L, const Packing& pk) const {
    const std::vector<Var> in = body.inputs();
    const auto [first, count] = input_groups(L);
    TapeBuilder b;
    std::vector<Var> map(static_cast<std::size_t>(body.size()) + 1, kNoVar);
    std::vector<bool> is_packed(in.size(), false);
    // A packed input is read (slice, reshape) where each operation uses it, so that the
    // iterations of a loop inside the body read advancing slices (cse merges the rest).
    std::vector<Row> element(static_cast<std::size_t>(body.size()) + 1);
    auto read = [&](Var v) {
      const Row& e = element[static_cast<std::size_t>(v)];
      if (e.ys == kNoVar) return map[static_cast<std::size_t>(v)];
      const Var one =
          b.call(*slice_, {e.ys}, {{"axis", int64_t{0}}, {"start", e.row}, {"stop", e.row + 1}, {"step", int64_t{1}}});
      return b.reshape(one, Shape{});
    };
    for (int g = 0; g < 3; ++g) {
      for (std::size_t i : pk.group[g]) is_packed[first[g] + i] = true;
      for (std::size_t i = 0; i < count[g]; ++i)
        if (!is_packed[first[g] + i]) map[static_cast<std::size_t>(in[first[g] + i])] = b.input(body.type(in[first[g] + i]));
      if (!pk.group[g].empty()) {
        const VarType scalar = body.type(in[first[g] + pk.group[g][0]]);
        const Var vec = b.input(VarType{scalar.dtype, Shape{static_cast<int64_t>(pk.group[g].size())}});
        for (std::size_t r = 0; r < pk.group[g].size(); ++r)
          element[static_cast<std::size_t>(in[first[g] + pk.group[g][r]])] = {vec, static_cast<int64_t>(r)};
      }
      if (g == 1)
        for (std::size_t i = first[1] + count[1]; i < first[2]; ++i)
          map[static_cast<std::size_t>(in[i])] = b.input(body.type(in[i]));  // the final-only carries
    }
    for (Var v = 1; v <= body.size(); ++v) {
      const Op& o = body.op(v);
      if (o.kind == OpKind::input) continue;
      std::vector<Var> args;
      for (Var a : o.args) args.push_back(read(a));
      map[static_cast<std::size_t>(v)] = b.copy(o, std::move(args));
    }
    std::vector<Var> outs, parts;
    for (std::size_t i = 0; i < L.carries.size(); ++i)
      if (!is_packed[first[1] + i]) outs.push_back(read(body.outputs[i]));
    for (std::size_t i : pk.group[1]) parts.push_back(b.reshape(read(body.outputs[i]), Shape{1}));
    if (!parts.empty()) outs.push_back(b.call(prims::concat(), std::move(parts), {{"axis", int64_t{0}}}));
    for (std::size_t j = L.carries.size(); j < body.outputs.size(); ++j) outs.push_back(read(body.outputs[j]));
    b.set_outputs(std::move(outs));
    return b.finish();
  }

  static bool all_constant(const TapeBuilder& b, const std::vector<Var>& args, std::size_t first,
                           const std::vector<std::size_t>& group) {
    for (std::size_t i : group)
      if (b.tape().op(args[first + i]).kind != OpKind::constant) return false;
    return true;
  }

  // Constant operands packed: element r of each (a scalar, or the scalars of all
  // iterations stacked) becomes column r of one constant.
  static Tensor packed_constant(const TapeBuilder& b, const std::vector<Var>& args, std::size_t first,
                                const std::vector<std::size_t>& group) {
    const Tensor& one = b.tape().op(args[first + group[0]]).value;
    const int64_t rows = one.numel(), m = static_cast<int64_t>(group.size());
    Tensor all(one.dtype(), one.shape().empty() ? Shape{m} : Shape{rows, m});
    const std::size_t bytes = dtype_size(one.dtype());
    auto* to = static_cast<char*>(all.mutable_raw());
    for (int64_t c = 0; c < m; ++c) {
      const auto* from = static_cast<const char*>(b.tape().op(args[first + group[static_cast<std::size_t>(c)]]).value.raw());
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(to + static_cast<std::size_t>(r * m + c) * bytes, from + static_cast<std::size_t>(r) * bytes, bytes);
    }
    return all;
  }

  // The scan's operands for a packed body: in each group, the operands not packed, then
  // the packed ones as one vector (consts, carries) or one stacked [R, m] (xs).
  std::vector<Var> packed_args(TapeBuilder& b, const Loop& L, const Packing& pk, const std::vector<Var>& args) const {
    const auto [first, count] = input_groups(L);
    std::vector<Var> out;
    for (int g = 0; g < 3; ++g) {
      std::vector<bool> is_packed(count[g], false);
      for (std::size_t i : pk.group[g]) is_packed[i] = true;
      for (std::size_t i = 0; i < count[g]; ++i)
        if (!is_packed[i]) out.push_back(args[first[g] + i]);
      // The packed operands as one constant if they all are constants (as the xs packed,
      // stacked constants, are), else concatenated.
      if (!pk.group[g].empty() && all_constant(b, args, first[g], pk.group[g])) {
        out.push_back(b.constant(packed_constant(b, args, first[g], pk.group[g])));
      } else if (!pk.group[g].empty()) {
        std::vector<Var> parts;
        const Shape one = g == 2 ? Shape{L.R, 1} : Shape{1};
        for (std::size_t i : pk.group[g]) parts.push_back(b.reshape(args[first[g] + i], one));
        out.push_back(b.call(prims::concat(), std::move(parts), {{"axis", g == 2 ? int64_t{1} : int64_t{0}}}));
      }
      if (g == 1) out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(first[1] + count[1]),
                             args.begin() + static_cast<std::ptrdiff_t>(first[2]));
    }
    return out;
  }

  // The xs values, stacked: constants into one constant, advancing slices as one slice.
  Var stacked(TapeBuilder& b, const Loop& L, const Loop::Xs& x, std::vector<Var>& map) const {
    const Op& o = op(L.start + x.j);
    const auto J = static_cast<std::size_t>(x.j);
    if (x.slot < 0 && is_slice(o)) {
      const int64_t delta = L.st.delta[J], start = x.first;
      const Var all = b.call(*slice_, {value(b, o.args[0], map)},
                             {{"axis", int64_t{0}}, {"start", start}, {"stop", start + L.R * delta}, {"step", int64_t{1}}});
      Shape s{L.R, delta};
      s.insert(s.end(), o.type.shape.begin() + 1, o.type.shape.end());
      return b.reshape(all, s);
    }
    const auto q = static_cast<std::size_t>(x.slot - L.st.first[J]);
    auto value_at = [&](int64_t k) -> const Tensor& {
      const Op& ok = op(L.start + static_cast<Var>(k * L.P) + x.j);
      return x.slot < 0 ? ok.value : op(ok.args[q]).value;
    };
    const Tensor& first = value_at(0);
    Shape s{L.R};
    s.insert(s.end(), first.shape().begin(), first.shape().end());
    Tensor all(first.dtype(), s);
    const std::size_t bytes = first.nbytes();
    for (int64_t k = 0; k < L.R; ++k)
      if (bytes > 0)
        std::memcpy(static_cast<char*>(all.mutable_raw()) + static_cast<std::size_t>(k) * bytes, value_at(k).raw(), bytes);
    return b.constant(all);
  }

  void emit_loop(TapeBuilder& b, const Loop& L, std::vector<Var>& map) const {
    std::vector<Var> args;
    for (Var u : L.consts) args.push_back(value(b, u, map));
    for (const auto& c : L.carries) args.push_back(value(b, c.second, map));
    for (int32_t j : L.final_only) args.push_back(b.or_zeros(kNoVar, op(L.start + j).type));
    for (const Loop::Xs& x : L.xs) args.push_back(stacked(b, L, x, map));
    Tape t = body(L);
    const Packing pk = packable(t, L);
    const std::vector<std::size_t>& packed = pk.group[1];
    if (pk.any()) {
      t = pack(t, L, pk);
      args = packed_args(b, L, pk, args);
    }
    if (o_.nested) t = reroll(t, o_);
    const std::size_t unpacked = L.carries.size() - packed.size() + (packed.empty() ? 0 : 1);
    const std::size_t K = unpacked + L.final_only.size();
    ScanParams scan;
    scan.body = std::make_shared<const Tape>(cleanup(t));
    scan.length = L.R, scan.K = K;
    scan.C = L.consts.size() - pk.group[0].size() + (pk.group[0].empty() ? 0 : 1);
    scan.policy = policy_named(o_.checkpoint);
    if (o_.checkpoint_arg != 0) scan.checkpoint_arg = o_.checkpoint_arg;
    const std::vector<Var> outs = b.call_results(prims::scan(), std::move(args), scan.attrs());
    // Where each position's values come out: its final carry, its ys.
    std::vector<Var> final_of(static_cast<std::size_t>(L.P), kNoVar), ys_of(static_cast<std::size_t>(L.P), kNoVar);
    std::vector<int64_t> element_of(static_cast<std::size_t>(L.P), -1);  // a packed carry's element
    {
      std::vector<int64_t> row(L.carries.size(), -1);
      for (std::size_t r = 0; r < packed.size(); ++r) row[packed[r]] = static_cast<int64_t>(r);
      std::vector<std::size_t> out_of(L.carries.size(), 0);
      for (std::size_t i = 0, o = 0; i < L.carries.size(); ++i)
        if (row[i] < 0) out_of[i] = o++;
      for (std::size_t c = L.carries.size(); c-- > 0;) {  // backwards: of two carries from one position, the first
        const auto J = static_cast<std::size_t>(L.carries[c].first);
        if (row[c] < 0) {
          final_of[J] = outs[out_of[c]], element_of[J] = -1;
        } else {
          final_of[J] = outs[unpacked - 1], element_of[J] = row[c];
        }
      }
    }
    for (std::size_t i = 0; i < L.final_only.size(); ++i)
      final_of[static_cast<std::size_t>(L.final_only[i])] = outs[unpacked + i];
    for (std::size_t i = 0; i < L.ys.size(); ++i) ys_of[static_cast<std::size_t>(L.ys[i])] = outs[K + i];
    for (auto [v, k] : L.reads) {
      const auto J = static_cast<std::size_t>((v - L.start) % L.P);
      if (k == L.R - 1 && final_of[J] != kNoVar) {
        if (element_of[J] >= 0) pending_[v] = {final_of[J], element_of[J]};  // an element of the packed carry
        else map[static_cast<std::size_t>(v)] = final_of[J];
        continue;
      }
      pending_[v] = {ys_of[J], k};  // read where it is used (value)
    }
  }

  // A value of an earlier iteration of a folded loop, read after it: row `row` of the
  // loop's stacked `ys`.
  struct Row {
    Var ys = kNoVar;
    int64_t row = 0;
  };

  // v's variable in the new tape. A row of a folded loop's ys is read (slice, reshape)
  // at each use, next to the operation that uses it, not all at once after the loop:
  // the reads of a following loop over those values then advance with its iterations,
  // and the next round folds that loop too (a chain of loops, as a Runge-Kutta step's
  // stages); cse merges the reads left repeated.
  Var value(TapeBuilder& b, Var v, const std::vector<Var>& map) const {
    if (const Var m = map[static_cast<std::size_t>(v)]; m != kNoVar) return m;
    const auto it = pending_.find(v);
    if (it == pending_.end()) return kNoVar;
    const Var row = b.call(*slice_, {it->second.ys},
                           {{"axis", int64_t{0}}, {"start", it->second.row}, {"stop", it->second.row + 1}, {"step", int64_t{1}}});
    return b.reshape(row, op(v).type.shape);
  }

  Tape emit(const std::vector<Loop>& loops) {
    TapeBuilder b;
    std::vector<Var> map(static_cast<std::size_t>(n_) + 1, kNoVar);
    auto next = loops.begin();
    for (Var v = 1; v <= n_;) {
      if (next != loops.end() && next->start == v) {
        emit_loop(b, *next, map);
        v = next->end();
        ++next;
        continue;
      }
      const Op& o = op(v);
      std::vector<Var> args;
      for (Var a : o.args) {
        args.push_back(value(b, a, map));
        if (args.back() == kNoVar)
          throw Error(fmt::format("reroll: internal error: %{} reads %{}, which a folded loop does not give", v, a));
      }
      map[static_cast<std::size_t>(v)] = b.copy(o, std::move(args));
      ++v;
    }
    std::vector<Var> outs;
    for (Var o : t_.outputs) outs.push_back(value(b, o, map));
    b.set_outputs(std::move(outs));
    return b.finish();
  }

  const Tape& t_;
  mutable std::unordered_map<Var, Row> pending_;  // emit: rows of folded loops' ys
  RerollOptions o_;
  Var n_;
  const Primitive* slice_;
  std::vector<uint64_t> k0_;
  std::vector<int64_t> start_at_;  // each slice's start (kNone for other operations)
  std::vector<Var> slice_at_;      // the slices, in order
  AttrHasher attr_hash_;
  std::vector<Var> last_use_;
  std::vector<int32_t> period_;
  std::vector<bool> is_output_;
};

}  // namespace

std::optional<Tape> detail::reroll_if_any(const Tape& tape, const RerollOptions& options) {
  std::optional<Tape> t = Reroller(tape, options).run();
  // Folding can line up what was apart (loops of loops whose bodies are now equal).
  for (int round = 1; t && round < kMaxRounds; ++round) {
    std::optional<Tape> again = Reroller(*t, options).run();
    if (!again) break;
    t = std::move(again);
  }
  return t;
}

Tape reroll(const Tape& tape, const RerollOptions& options) {
  std::optional<Tape> t = detail::reroll_if_any(tape, options);
  if (!t) {
    Tape same = tape;
    same.cleaned = false;
    return same;
  }
  return std::move(*t);
}

Tape reroll(const Tape& tape) { return reroll(tape, RerollOptions{}); }

}  // namespace reel
