// Revolve's binomial checkpointing schedule (reel/ir/revolve.hpp): the splits, the
// schedule's recursion and its counts. The `revolve` primitive that runs it on tensors
// is in prims_revolve.cpp.
#include "reel/ir/revolve.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "reel/error.hpp"

namespace reel {

namespace {

// beta(c, t) = C(c + t, t): the most steps c snapshots reverse advancing each at most t
// times; with it, what reversing l steps needs: t, beta(c, t - 2), beta(c, t - 1) and
// beta(c, t), beta(c - 1, t - 1) and beta(c - 1, t) (128-bit: beta(c, t - 1) < l <= 2^63
// before each step, times at most c + 1).
struct Binomials {
  using W = __int128;
  int64_t t = 0;
  W before2 = 0, before = 0, beta = 1, fewer_before = 0, fewer = 1;
  Binomials(int64_t l, int64_t c) {
    while (beta < l) {
      ++t;
      before2 = before, before = beta, beta = beta * (c + t) / t;
      fewer_before = fewer, fewer = fewer * (c - 1 + t) / t;
    }
  }
};

// Reverses steps [a, b) from the state in slot s (holding the state before a), with c
// snapshots, slot s's among them: keep the state after m steps in slot s + 1, reverse
// [a + m, b) with c - 1, then [a, a + m) with c again (restore).
void reverse(int64_t a, int64_t b, int s, int64_t c, int work, const RevolveActions& act) {
  while (b > a) {
    if (b - a == 1) return act.turn(s, a);
    if (c == 1) {  // nothing more to keep: each step from a again
      for (int64_t i = b - 1; i > a; --i) act.advance(s, a, work, i), act.turn(work, i);
      return act.turn(s, a);
    }
    const int64_t m = revolve_split(b - a, c);
    act.advance(s, a, s + 1, a + m);
    reverse(a + m, b, s + 1, c - 1, work, act);
    b = a + m;
  }
}

}  // namespace

// The optimal splits m are (Griewank; checked against dynamic programming in
// tests/test_checkpoint.cpp) max(1, beta(c, t - 2), l - beta(c - 1, t)) <= m <=
// min(l - 1, beta(c, t - 1), l - beta(c - 1, t - 1)).
int64_t revolve_split(int64_t l, int64_t c) {
  if (l < 2 || c < 2) throw Error(fmt::format("revolve: expected >= 2 steps and snapshots to split, got {} and {}", l, c));
  const Binomials k(l, c);
  const auto hi = std::min<Binomials::W>({l - 1, k.before, l - k.fewer_before});
  const auto lo = std::max<Binomials::W>({1, k.before2, l - k.fewer});
  if (lo > hi) throw Error(fmt::format("revolve: no split of {} steps with {} snapshots (internal error)", l, c));
  return static_cast<int64_t>(hi);
}

int64_t revolve_advances(int64_t l, int64_t c) {
  if (l < 0 || c < 1) throw Error(fmt::format("revolve: expected steps >= 0 and snapshots >= 1, got {} and {}", l, c));
  using W = Binomials::W;
  if (l <= 1) return 0;
  const W total = c == 1 ? W(l) * (l - 1) / 2 : [&] {
    const Binomials k(l, c);
    W b = 1;  // beta(c + 1, t - 1)
    for (int64_t i = 1; i < k.t; ++i) b = b * (c + 1 + i) / i;
    return W(k.t) * l - b;
  }();
  return total > W(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(total);
}

// With c >= l - 1 snapshots for l steps every split is m = 1 (beta(c, 1) = c + 1 >= l),
// and so again one level down: the schedule keeps every state, and more snapshots
// than steps are never used.
int64_t revolve_slots(int64_t steps, int64_t snapshots) {
  if (steps < 0 || snapshots < 1)
    throw Error(fmt::format("revolve: expected steps >= 0 and snapshots >= 1, got {} and {}", steps, snapshots));
  return std::min(snapshots, std::max<int64_t>(steps, 1)) + 1;  // and the working slot
}

void revolve(int64_t steps, int64_t snapshots, const RevolveActions& actions) {
  const int64_t used = revolve_slots(steps, snapshots) - 1;
  if (used > std::numeric_limits<int>::max() - 1)
    throw Error(fmt::format("revolve: expected fewer than 2^31 snapshots in use, got {} for {} steps", used, steps));
  reverse(0, steps, 0, used, static_cast<int>(used), actions);
}

}  // namespace reel
