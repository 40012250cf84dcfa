#include <cstring>
#include <unordered_map>

#include "reel/passes.hpp"
#include "rewrite.hpp"

namespace reel {

namespace {

// Equal for exactly the operations that compute the same value: the same primitive,
// arguments (commutative ones in order), attributes and type, or the same constant
// bytes and type. Hashed directly: formatting keys as text cost most of CSE's time.
struct Key {
  const Op* op;
  std::vector<Var> args;
  std::size_t hash = 0;

  bool operator==(const Key& o) const {
    const Op& a = *op;
    const Op& b = *o.op;
    if (a.kind != b.kind || a.type != b.type) return false;
    if (a.kind == OpKind::constant)
      return std::memcmp(a.value.raw(), b.value.raw(), a.value.nbytes()) == 0;
    return a.prim == b.prim && args == o.args && a.attrs == b.attrs;
  }
};

struct KeyHash {
  std::size_t operator()(const Key& k) const { return k.hash; }
};

void mix(std::size_t& h, std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }

Key make_key(const Op& op, const std::vector<Var>& args) {
  Key k{&op, args, 0};
  if (op.kind == OpKind::call && op.prim->commutative && k.args.size() == 2 && k.args[0] > k.args[1])
    std::swap(k.args[0], k.args[1]);
  mix(k.hash, static_cast<std::size_t>(op.kind));
  mix(k.hash, static_cast<std::size_t>(op.type.dtype));
  for (int64_t d : op.type.shape) mix(k.hash, static_cast<std::size_t>(d));
  if (op.kind == OpKind::constant) {
    mix(k.hash, std::hash<std::string_view>()(
                    std::string_view(static_cast<const char*>(op.value.raw()), op.value.nbytes())));
  } else {
    mix(k.hash, std::hash<const void*>()(op.prim));
    for (Var a : k.args) mix(k.hash, static_cast<std::size_t>(a));
  }
  return k;
}

}  // namespace

Tape cse(const Tape& tape) {
  std::unordered_map<Key, Var, KeyHash> seen;
  seen.reserve(static_cast<std::size_t>(tape.size()));
  return passes::rewrite("cse", tape, [&](TapeBuilder& b, Var v, const Op& op, std::vector<Var> args) {
    if (op.kind == OpKind::input) return b.copy(op, {});
    Key k = make_key(tape.op(v), args);
    if (auto it = seen.find(k); it != seen.end()) return it->second;
    const Var out = b.copy(op, std::move(args));
    seen.emplace(std::move(k), out);
    return out;
  });
}

}  // namespace reel
