#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "prims.hpp"

namespace reel {

namespace {

// The registry: the built-in primitives, then those registered at run time. A deque,
// so that the addresses tapes hold stay valid as it grows; never destroyed, since
// tapes may outlive static destruction.
struct Registry {
  std::shared_mutex mutex;
  std::deque<Primitive> primitives;
  std::unordered_map<std::string, const Primitive*> by_name;
  std::size_t builtins = 0;  // the first ones
};

void check_name(const Primitive& p) {
  if (p.name.empty() || !std::all_of(p.name.begin(), p.name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      }))
    throw Error(fmt::format("register_primitive: expected a name of letters, digits and '_', got '{}'", p.name));
}

void check_validated(const Primitive& p, bool builtin);

// Moves the deprecated spellings of the rules into their one form (never given with it).
void merge_old_spellings(Primitive& p) {
  auto merge = [&](auto& one, auto& old, const char* one_name, const char* old_name) {
    if (!old) return;
    if (one)
      throw Error(fmt::format("register_primitive: primitive '{}' gives both {} and {} (the older spelling of the "
                              "same rule); give {} only", p.name, one_name, old_name, one_name));
    one = [f = std::move(old)](auto&&... args) { return f(std::forward<decltype(args)>(args)...); };
    old = nullptr;
  };
  merge(p.infer, p.infer_results, "infer", "infer_results");
  merge(p.eager, p.eager_results, "eager", "eager_results");
  merge(p.tangent, p.tangent_results, "tangent", "tangent_results");
}

// The checks every primitive passes, built in or registered, and the one
// normalisation: an elementwise primitive without an element rule is opaque.
void validate(Primitive& p, bool builtin) {
  check_name(p);
  merge_old_spellings(p);
  if (p.structure == Structure::elementwise && !p.element) p.structure = Structure::opaque;
  check_validated(p, builtin);
}

// Adds a validated primitive (the caller holds the lock, or is building the registry).
const Primitive& insert(Registry& r, Primitive p) {
  if (r.by_name.count(p.name))
    throw Error(fmt::format("register_primitive: a primitive named '{}' exists already", p.name));
  r.primitives.push_back(std::move(p));
  const Primitive& added = r.primitives.back();
  r.by_name[added.name] = &added;
  return added;
}

Registry& registry() {
  // Built once, on first use; registration is explicit (not by static constructors)
  // so that linking ir/ as a static library cannot drop primitives. Built-in
  // primitives pass register_primitive's checks.
  static Registry* r = [] {
    auto* reg = new Registry();
    std::vector<Primitive> v;
    prims::add_binary(v);
    prims::add_unary(v);
    prims::add_reductions(v);
    prims::add_shape_ops(v);
    prims::add_indexing(v);
    prims::add_nn(v);
    prims::add_control(v);
    prims::add_loops(v);
    prims::add_while(v);
    prims::add_calls(v);
    for (Primitive& p : v) {
      validate(p, true);
      insert(*reg, std::move(p));
    }
    reg->builtins = reg->primitives.size();
    return reg;
  }();
  return *r;
}

}  // namespace

const Primitive* find_primitive(std::string_view name) {
  Registry& r = registry();
  std::shared_lock lock(r.mutex);
  auto it = r.by_name.find(std::string(name));
  return it == r.by_name.end() ? nullptr : it->second;
}

const Primitive& primitive(std::string_view name) {
  if (const Primitive* p = find_primitive(name)) return *p;
  throw Error(fmt::format("unknown primitive '{}' (not built in, and not registered with "
                          "reel::define_primitive or reel::register_primitive)", name));
}

bool is_builtin(const Primitive& p) {
  Registry& r = registry();
  std::shared_lock lock(r.mutex);
  for (std::size_t i = 0; i < r.builtins; ++i)
    if (&r.primitives[i] == &p) return true;
  return false;
}

std::vector<const Primitive*> all_primitives() {
  Registry& r = registry();
  std::shared_lock lock(r.mutex);
  std::vector<const Primitive*> out;
  for (const Primitive& p : r.primitives) out.push_back(&p);
  return out;
}

void check_primitive(const Primitive& p, bool builtin) {
  Primitive copy = p;
  validate(copy, builtin);
}

namespace {

// The checks of a primitive whose older spellings are merged and whose structure is
// normalised (validate).
void check_validated(const Primitive& p, bool builtin) {
  auto missing = [&](const char* rule) {
    return Error(fmt::format("register_primitive: primitive '{}' has no {}", p.name.empty() ? "?" : p.name, rule));
  };
  check_name(p);
  if (p.arity < 0 && p.arity != kVariadic)
    throw Error(fmt::format("register_primitive: primitive '{}' has a negative arity", p.name));
  if (p.results < 1 && p.results != kVariadic) throw Error(fmt::format("register_primitive: primitive '{}' has {} results", p.name, p.results));
  if (p.arity == 0)
    for (const AttrSpec& spec : p.attrs)
      if (spec.kind == AttrKind::axis || spec.kind == AttrKind::axes)
        throw Error(fmt::format("register_primitive: primitive '{}' has an axis attribute '{}' (an axis of the first "
                                "argument) but takes no arguments", p.name, spec.name));
  if (p.infer_results || p.eager_results || p.tangent_results)
    throw Error(fmt::format("register_primitive: primitive '{}' still holds a rule in its older spelling "
                            "(infer_results, eager_results, tangent_results)", p.name));
  if (!p.infer) throw missing("type rule (infer)");
  if (!p.eager) throw missing("eager evaluation (eager)");
  if (p.results != 1 && (p.element || p.linear || p.commutative || p.involution || p.left_identity || p.right_identity))
    throw Error(fmt::format("register_primitive: primitive '{}' has {} results: an element rule and the "
                            "properties linear, commutative, involution and identities need one result",
                            p.name, p.results));
  if (!builtin && p.structure != Structure::elementwise && p.structure != Structure::opaque)
    throw Error(fmt::format("register_primitive: primitive '{}': only the elementwise (with an element "
                            "rule) and opaque structures are open to registered primitives", p.name));
  if (p.structure == Structure::elementwise && !p.element)
    throw Error(fmt::format("register_primitive: primitive '{}' is elementwise without an element rule", p.name));
}

}  // namespace

const Primitive& register_primitive(Primitive p) {
  validate(p, false);
  Registry& r = registry();
  std::unique_lock lock(r.mutex);
  return insert(r, std::move(p));
}

void check_result_count(const Primitive& p, std::string_view rule, std::size_t given) {
  if (p.results == kVariadic) {
    if (given == 0) throw Error(fmt::format("{} of '{}' gave no values, expected at least one", rule, p.name));
    return;
  }
  if (given != static_cast<std::size_t>(p.results))
    throw Error(fmt::format("{} of '{}' gave {} value{}, expected {} (one per result)", rule, p.name, given,
                            given == 1 ? "" : "s", p.results));
}

std::string type_str(const VarType& t) { return reel::type_str(t.dtype, t.shape); }

namespace prims {

void expect_same_dtype(const char* op, const VarType& a, const VarType& b) {
  if (a.dtype != b.dtype)
    throw Error(fmt::format("{}: dtypes differ: {} and {}", op, type_str(a), type_str(b)));
}

void expect_rank(const char* op, const VarType& t, int64_t rank) {
  if (static_cast<int64_t>(t.shape.size()) != rank)
    throw Error(fmt::format("{}: expected a {}-d tensor, got {}", op, rank, type_str(t)));
}

std::function<std::vector<Var>(TapeBuilder&, const AdjointArgs&)> no_adjoint(std::size_t n) {
  return [n](TapeBuilder&, const AdjointArgs&) { return std::vector<Var>(n, kNoVar); };
}

Var no_tangent(TapeBuilder&, const TangentArgs&) { return kNoVar; }

Var constant_like(TapeBuilder& b, double v, Var like) { return b.scalar(v, b.type(like).dtype); }

Var zeros_of(TapeBuilder& b, const VarType& t) { return b.broadcast_to(b.scalar(0.0, t.dtype), t.shape); }

}  // namespace prims
}  // namespace reel
