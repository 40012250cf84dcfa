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

Registry& registry() {
  // Built once, on first use; registration is explicit (not by static constructors)
  // so that linking ir/ as a static library cannot drop primitives.
  static Registry* r = [] {
    auto* reg = new Registry();
    std::vector<Primitive> v;
    prims::add_elementwise(v);
    prims::add_reductions(v);
    prims::add_shape_ops(v);
    prims::add_indexing(v);
    prims::add_nn(v);
    prims::add_control(v);
    for (Primitive& p : v) {
      reg->primitives.push_back(std::move(p));
      reg->by_name[reg->primitives.back().name] = &reg->primitives.back();
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

const Primitive& register_primitive(Primitive p) {
  auto missing = [&](const char* rule) {
    return Error(fmt::format("register_primitive: primitive '{}' has no {}", p.name.empty() ? "?" : p.name, rule));
  };
  if (p.name.empty() || !std::all_of(p.name.begin(), p.name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      }))
    throw Error(fmt::format("register_primitive: expected a name of letters, digits and '_', got '{}'", p.name));
  if (p.arity < 0 && p.arity != kVariadic)
    throw Error(fmt::format("register_primitive: primitive '{}' has a negative arity", p.name));
  if (p.results < 1) throw Error(fmt::format("register_primitive: primitive '{}' has {} results", p.name, p.results));
  if (p.arity == 0)
    for (const AttrSpec& spec : p.attrs)
      if (spec.kind == AttrKind::axis || spec.kind == AttrKind::axes)
        throw Error(fmt::format("register_primitive: primitive '{}' has an axis attribute '{}' (an axis of the first "
                                "argument) but takes no arguments", p.name, spec.name));
  auto mismatched = [&](const char* given, const char* want) {
    return Error(fmt::format("register_primitive: primitive '{}' has {} result{} but gives {}; use {}", p.name,
                             p.results, p.results == 1 ? "" : "s", given, want));
  };
  if (p.results == 1) {
    if (p.infer_results) throw mismatched("infer_results", "infer");
    if (p.eager_results) throw mismatched("eager_results", "eager");
    if (p.tangent_results) throw mismatched("tangent_results", "tangent");
    if (!p.infer) throw missing("type rule (infer)");
    if (!p.eager) throw missing("eager evaluation (eager)");
  } else {
    if (p.infer) throw mismatched("infer", "infer_results");
    if (p.eager) throw mismatched("eager", "eager_results");
    if (p.tangent) throw mismatched("tangent", "tangent_results");
    if (!p.infer_results) throw missing("type rule for its several results (infer_results)");
    if (!p.eager_results) throw missing("eager evaluation for its several results (eager_results)");
    if (p.element || p.linear || p.commutative || p.involution || p.left_identity || p.right_identity)
      throw Error(fmt::format("register_primitive: primitive '{}' has {} results: an element rule and the "
                              "properties linear, commutative, involution and identities need one result",
                              p.name, p.results));
  }
  if (p.structure == Structure::elementwise && !p.element) p.structure = Structure::opaque;
  if (p.structure != Structure::elementwise && p.structure != Structure::opaque)
    throw Error(fmt::format("register_primitive: primitive '{}': only the elementwise (with an element "
                            "rule) and opaque structures are open to registered primitives", p.name));
  Registry& r = registry();
  std::unique_lock lock(r.mutex);
  if (r.by_name.count(p.name))
    throw Error(fmt::format("register_primitive: a primitive named '{}' exists already", p.name));
  r.primitives.push_back(std::move(p));
  const Primitive& added = r.primitives.back();
  r.by_name[added.name] = &added;
  return added;
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

}  // namespace prims
}  // namespace reel
