#include <cstring>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "reel/passes.hpp"
#include "rewrite.hpp"

namespace reel {

namespace {

// Two operations of the tape being built are equal when they compute the same value:
// the same primitive, arguments (a commutative primitive's two in either order),
// attributes and type, or the same constant bytes and type. The set holds variable
// numbers and looks at the operations themselves: no key is formatted or copied.
struct OpHash {
  const Tape* tape;
  static void mix(std::size_t& h, std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }
  std::size_t operator()(Var v) const {
    const Op& op = tape->op(v);
    std::size_t h = static_cast<std::size_t>(op.kind);
    mix(h, static_cast<std::size_t>(op.type.dtype));
    for (int64_t d : op.type.shape) mix(h, static_cast<std::size_t>(d));
    if (op.kind == OpKind::constant) {
      mix(h, std::hash<std::string_view>()(
                 std::string_view(static_cast<const char*>(op.value.raw()), op.value.nbytes())));
      return h;
    }
    if (op.kind == OpKind::result) {  // result `index` of the call in args[0]
      mix(h, static_cast<std::size_t>(op.args[0]));
      mix(h, static_cast<std::size_t>(op.index));
      return h;
    }
    mix(h, std::hash<const void*>()(op.prim));
    // The numeric attributes too: the reads of a vector's elements (slices of one input
    // at each start) differ only there, and one bucket for all of them made CSE of a
    // scalar trace quadratic. (The others, rarer, are left to OpEqual.)
    for (const auto& [name, value] : op.attrs.items()) {
      if (const auto* i = std::get_if<int64_t>(&value)) mix(h, static_cast<std::size_t>(*i));
      else if (const auto* r = std::get_if<double>(&value)) mix(h, std::hash<double>()(*r));
      else if (const auto* s = std::get_if<Shape>(&value))
        for (int64_t d : *s) mix(h, static_cast<std::size_t>(d));
    }
    if (op.prim->commutative && op.args.size() == 2) {
      mix(h, static_cast<std::size_t>(std::min(op.args[0], op.args[1])));
      mix(h, static_cast<std::size_t>(std::max(op.args[0], op.args[1])));
    } else {
      for (Var a : op.args) mix(h, static_cast<std::size_t>(a));
    }
    return h;
  }
};

struct OpEqual {
  const Tape* tape;
  bool operator()(Var x, Var y) const {
    const Op& a = tape->op(x);
    const Op& b = tape->op(y);
    if (a.kind != b.kind || a.type != b.type) return false;
    if (a.kind == OpKind::constant)
      return std::memcmp(a.value.raw(), b.value.raw(), a.value.nbytes()) == 0;
    if (a.kind == OpKind::result) return a.args == b.args && a.index == b.index;
    if (a.prim != b.prim || a.attrs != b.attrs) return false;
    if (a.args == b.args) return true;
    return a.prim->commutative && a.args.size() == 2 && b.args.size() == 2 &&
           a.args[0] == b.args[1] && a.args[1] == b.args[0];
  }
};

// A set of the new tape's variables by value (OpHash, OpEqual): open addressing with
// linear probing over a power-of-two table of (hash, variable) pairs, at most half full.
// A probe compares hashes before it looks at an operation. (An unordered_set's chained
// nodes, even from an arena, were two fifths of CSE's time on a scalar gradient.)
class VarSet {
 public:
  VarSet(std::size_t expected, const Tape& tape) : hash_{&tape}, equal_{&tape} {
    std::size_t capacity = 16;
    while (capacity < 2 * expected) capacity *= 2;
    slots_.assign(capacity, Slot{0, kNoVar});
  }
  // v, and true, if no equal variable is in the set (v is added); else the equal one.
  std::pair<Var, bool> insert(Var v) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    const std::size_t h = hash_(v);
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.var == kNoVar) {
        s = {h, v};
        ++count_;
        return {v, true};
      }
      if (s.hash == h && equal_(s.var, v)) return {s.var, false};
    }
  }

 private:
  struct Slot {
    std::size_t hash;
    Var var;
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(2 * old.size(), Slot{0, kNoVar});
    const std::size_t mask = slots_.size() - 1;
    for (const Slot& s : old)
      if (s.var != kNoVar) {
        std::size_t i = s.hash & mask;
        while (slots_[i].var != kNoVar) i = (i + 1) & mask;
        slots_[i] = s;
      }
  }
  OpHash hash_;
  OpEqual equal_;
  std::vector<Slot> slots_;
  std::size_t count_ = 0;
};

// CSE's step: an operation equal to one already in the new tape is that one. Builder:
// TapeBuilder, or passes::InPlace.
template <class Builder>
class Merger {
 public:
  explicit Merger(std::size_t size) : size_(size) {}
  Var operator()(Builder& b, Var, Op&& op) {
    if (builder_ != &b) {  // the first call: the set looks into the tape being built
      builder_ = &b;
      seen_.emplace(size_, b.tape());
    }
    const bool mergeable = op.kind != OpKind::input && !(op.kind == OpKind::call && !op.prim->pure);
    const Var v = b.take(std::move(op));
    if (!mergeable) return v;
    const auto [found, added] = seen_->insert(v);
    if (added) return v;
    b.pop();  // an equal operation exists: drop the copy
    return found;
  }

 private:
  std::size_t size_;
  Builder* builder_ = nullptr;
  std::optional<VarSet> seen_;
};

}  // namespace

Tape cse(const Tape& tape) {
  Merger<TapeBuilder> m(static_cast<std::size_t>(tape.size()));
  return passes::rewrite_ops("cse", tape, std::ref(m));
}

Tape passes::cse(Tape&& tape) {
  Merger<InPlace> m(static_cast<std::size_t>(tape.size()));
  return compact(std::move(tape), std::ref(m));
}

}  // namespace reel
