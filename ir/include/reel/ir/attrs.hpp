#pragma once
// Static attributes of a primitive call: pow's exponent, sum's axis, reshape's shape.
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "reel/shape.hpp"

namespace reel {

using AttrValue = std::variant<int64_t, double, Shape>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items) : items_(items) {}

  void set(const std::string& name, AttrValue value);
  bool has(const std::string& name) const;
  const AttrValue& get(const std::string& name) const;  // throws reel::Error if missing
  int64_t integer(const std::string& name) const;
  double real(const std::string& name) const;
  const Shape& shape(const std::string& name) const;

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  bool empty() const { return items_.empty(); }
  bool operator==(const Attrs& other) const { return items_ == other.items_; }

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

}  // namespace reel
