#include <fmt/format.h>

#include <unordered_map>

#include "reel/passes.hpp"
#include "rewrite.hpp"

namespace reel {

namespace {

// A key equal for exactly the operations that compute the same value.
std::string key(const Op& op, const std::vector<Var>& args) {
  std::string k = type_str(op.type);
  if (op.kind == OpKind::constant) {
    const auto* bytes = static_cast<const char*>(op.value.raw());
    return k + " const " + std::string(bytes, op.value.nbytes());
  }
  std::vector<Var> a = args;
  if ((op.prim->name == "add" || op.prim->name == "mul") && a.size() == 2 && a[0] > a[1])
    std::swap(a[0], a[1]);  // commutative
  k += fmt::format(" {}({})", op.prim->name, fmt::join(a, ","));
  for (const auto& [name, value] : op.attrs.items()) {
    k += " " + name + "=";
    if (const auto* i = std::get_if<int64_t>(&value)) k += fmt::format("i{}", *i);
    else if (const auto* d = std::get_if<double>(&value)) k += fmt::format("d{}", *d);
    else k += shape_str(std::get<Shape>(value));
  }
  return k;
}

}  // namespace

Tape cse(const Tape& tape) {
  std::unordered_map<std::string, Var> seen;
  return passes::rewrite("cse", tape, [&](TapeBuilder& b, Var, const Op& op, std::vector<Var> args) {
    if (op.kind == OpKind::input) return b.copy(op, {});
    const std::string k = key(op, args);
    if (auto it = seen.find(k); it != seen.end()) return it->second;
    const Var v = b.copy(op, std::move(args));
    seen.emplace(k, v);
    return v;
  });
}

}  // namespace reel
