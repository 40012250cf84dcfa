#include <fmt/format.h>

#include "prims.hpp"

namespace reel {

namespace {
const std::vector<Primitive>& table() {
  // Built once, on first use; registration is explicit (not by static constructors)
  // so that linking ir/ as a static library cannot drop primitives.
  static const std::vector<Primitive> t = [] {
    std::vector<Primitive> v;
    prims::add_elementwise(v);
    prims::add_reductions(v);
    prims::add_shape_ops(v);
    return v;
  }();
  return t;
}
}  // namespace

const Primitive* find_primitive(std::string_view name) {
  for (const Primitive& p : table())
    if (p.name == name) return &p;
  return nullptr;
}

const Primitive& primitive(std::string_view name) {
  if (const Primitive* p = find_primitive(name)) return *p;
  throw Error(fmt::format("unknown primitive '{}'", name));
}

std::vector<const Primitive*> all_primitives() {
  std::vector<const Primitive*> out;
  for (const Primitive& p : table()) out.push_back(&p);
  return out;
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
