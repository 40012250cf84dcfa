#include "reel/ir/attrs.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reel/error.hpp"
#include "reel/ir/tape.hpp"

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

std::vector<double> Attrs::reals(const std::string& name) const {
  const AttrValue& v = get(name);
  if (const auto* r = std::get_if<std::vector<double>>(&v)) return *r;
  if (const auto* i = std::get_if<Shape>(&v)) return {i->begin(), i->end()};
  throw Error(fmt::format("attribute '{}' must be a list of numbers", name));
}

bool Attrs::boolean(const std::string& name) const {
  const auto* v = std::get_if<bool>(&get(name));
  if (v == nullptr) throw Error(fmt::format("attribute '{}' must be true or false", name));
  return *v;
}

const std::string& Attrs::string(const std::string& name) const {
  const auto* v = std::get_if<std::string>(&get(name));
  if (v == nullptr) throw Error(fmt::format("attribute '{}' must be a string", name));
  return *v;
}

DType Attrs::dtype(const std::string& name) const {
  const auto* v = std::get_if<DType>(&get(name));
  if (v == nullptr) throw Error(fmt::format("attribute '{}' must be a dtype", name));
  return *v;
}

const Tape& Attrs::tape(const std::string& name) const {
  const auto* v = std::get_if<TapeRef>(&get(name));
  if (v == nullptr || !v->tape) throw Error(fmt::format("attribute '{}' must be a tape", name));
  return *v->tape;
}

bool TapeRef::operator==(const TapeRef& other) const {
  if (tape == other.tape) return true;
  return tape && other.tape && same_tape(*tape, *other.tape);
}

std::string attr_str(const AttrValue& v) {
  if (const auto* t = std::get_if<TapeRef>(&v)) {  // its lines joined by "; "
    std::string text = t->tape ? to_string(*t->tape) : "";
    std::string out = "{";
    for (char c : text) out += c == '\n' ? std::string("; ") : std::string(1, c);
    return out + "}";
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return fmt::format("{}", *i);
  if (const auto* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  if (const auto* s = std::get_if<Shape>(&v)) return shape_str(*s);
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* t = std::get_if<DType>(&v)) return std::string(dtype_name(*t));
  if (const auto* r = std::get_if<std::vector<double>>(&v)) return fmt::format("[{}]", fmt::join(*r, ", "));
  std::string out = "\"";
  for (char c : std::get<std::string>(v)) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace reel
