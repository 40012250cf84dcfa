#pragma once
// Static attributes of a primitive call: pow's exponent, sum's axis, reshape's shape,
// and for user primitives booleans, strings, dtypes, lists and tapes. In text: 2, 0.5,
// [2,3] (a shape or list of integers), [0.5, 1] (a list of reals), true, "same", f32,
// {inp %1::f64[3]; %2 = sin(%1)::f64[3]; out %2} (a tape, its lines joined by ';').
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "reel/shape.hpp"

namespace reel {

class Tape;

// A tape held by an attribute: the body of a structured operation (a loop, a call of a
// function by value), immutable and shared by the copies of the call. Passes do not
// look inside it; the primitive's rules do (they may play, differentiate or inline
// it). Two are equal when their text is.
struct TapeRef {
  std::shared_ptr<const Tape> tape;
  bool operator==(const TapeRef& other) const;
};

using AttrValue = std::variant<int64_t, double, Shape, bool, std::string, DType, std::vector<double>, TapeRef>;

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
  const Tape& tape(const std::string& name) const;

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  bool empty() const { return items_.empty(); }
  bool operator==(const Attrs& other) const { return items_ == other.items_; }

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

}  // namespace reel
