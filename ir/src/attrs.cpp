#include "reel/ir/attrs.hpp"

#include <fmt/format.h>

#include "reel/error.hpp"

namespace reel {

void Attrs::set(const std::string& name, AttrValue value) {
  for (auto& [n, v] : items_)
    if (n == name) {
      v = std::move(value);
      return;
    }
  items_.emplace_back(name, std::move(value));
}

bool Attrs::has(const std::string& name) const {
  for (const auto& item : items_)
    if (item.first == name) return true;
  return false;
}

const AttrValue& Attrs::get(const std::string& name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return v;
  throw Error(fmt::format("attribute '{}' is missing", name));
}

int64_t Attrs::integer(const std::string& name) const {
  const auto* v = std::get_if<int64_t>(&get(name));
  if (v == nullptr) throw Error(fmt::format("attribute '{}' must be an integer", name));
  return *v;
}

double Attrs::real(const std::string& name) const {
  const AttrValue& v = get(name);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  throw Error(fmt::format("attribute '{}' must be a number", name));
}

const Shape& Attrs::shape(const std::string& name) const {
  const auto* v = std::get_if<Shape>(&get(name));
  if (v == nullptr) throw Error(fmt::format("attribute '{}' must be a shape", name));
  return *v;
}

}  // namespace reel
