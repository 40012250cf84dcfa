#pragma once
// Static attributes of a primitive call: pow's exponent, sum's axis, reshape's shape,
// and for user primitives booleans, strings, dtypes and lists. In text: 2, 0.5,
// [2,3] (a shape or list of integers), [0.5, 1] (a list of reals), true, "same", f32.
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "reel/shape.hpp"

namespace reel {

using AttrValue = std::variant<int64_t, double, Shape, bool, std::string, DType, std::vector<double>>;

// The text form of a value, as tapes print it; parse_tape reads it back.
std::string attr_str(const AttrValue& value);

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
  const std::vector<int64_t>& ints(const std::string& name) const { return shape(name); }
  std::vector<double> reals(const std::string& name) const;  // a list of numbers
  bool boolean(const std::string& name) const;
  const std::string& string(const std::string& name) const;
  DType dtype(const std::string& name) const;

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  bool empty() const { return items_.empty(); }
  bool operator==(const Attrs& other) const { return items_ == other.items_; }

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

}  // namespace reel
