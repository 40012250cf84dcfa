// Reading the evals' JSON input into tensors and writing their results (evals.hpp).
#include <algorithm>
#include <cmath>
#include <optional>

#include "evals.hpp"

namespace gradbench::evals {

const json& field(const json& input, const char* name) {
  if (!input.is_object() || !input.contains(name))
    throw reel::Error(fmt::format("evaluate: the input has no field {}", name));
  return input.at(name);
}

int64_t integer_of(const json& v, std::string_view eval, const std::string& what, int64_t lo, int64_t hi,
                   std::string_view why_hi) {
  constexpr int64_t lowest = std::numeric_limits<int64_t>::min(), highest = std::numeric_limits<int64_t>::max();
  std::optional<int64_t> got;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() <= static_cast<uint64_t>(highest)) got = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    got = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    // (2^63 is the first double past int64; -2^63 is in it.)
    if (std::isfinite(d) && d == std::trunc(d) && d >= -0x1p63 && d < 0x1p63) got = static_cast<int64_t>(d);
  }
  if (got && *got >= lo && *got <= hi) return *got;
  const std::string expected = hi != highest  ? fmt::format("an integer from {} to {}{}", lo, hi, why_hi)
                               : lo == 0      ? std::string("a non-negative integer")
                               : lo == 1      ? std::string("a positive integer")
                               : lo == lowest ? std::string("an integer")
                                              : fmt::format("an integer of at least {}", lo);
  throw reel::Error(fmt::format("{}: {} must be {}, got {}", eval, what, expected, v.dump()));
}

int64_t integer(const json& input, std::string_view eval, const char* name, int64_t lo, int64_t hi,
                std::string_view why_hi) {
  return integer_of(field(input, name), eval, fmt::format("\"{}\"", name), lo, hi, why_hi);
}

std::vector<int64_t> integers(const json& v, std::string_view eval, const std::string& what, int64_t lo, int64_t hi) {
  if (!v.is_array()) throw reel::Error(fmt::format("{}: {} must be an array of integers, got {}", eval, what, v.dump()));
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out.push_back(integer_of(v[i], eval, fmt::format("{}[{}]", what, i), lo, hi));
  return out;
}

double number(const json& input, const char* name) {
  const json& v = field(input, name);
  if (!v.is_number()) throw reel::Error(fmt::format("evaluate: expected {} to be a number, got {}", name, v.dump()));
  return v.get<double>();
}

Tensor tensor_of(const json& v, const char* name) {
  if (!v.is_array()) throw reel::Error(fmt::format("evaluate: expected {} to be an array", name));
  std::vector<double> values;
  if (v.empty() || !v.front().is_array()) {
    values.reserve(v.size());
    for (const json& e : v) {
      if (!e.is_number()) throw reel::Error(fmt::format("evaluate: expected {} to hold numbers", name));
      values.push_back(e.get<double>());
    }
    return reel::tensor(values, {static_cast<int64_t>(values.size())});
  }
  const std::size_t cols = v.front().size();
  values.reserve(v.size() * cols);
  for (const json& row : v) {
    if (!row.is_array() || row.size() != cols)
      throw reel::Error(fmt::format("evaluate: expected {} to be a matrix with rows of {} numbers", name, cols));
    for (const json& e : row) {
      if (!e.is_number()) throw reel::Error(fmt::format("evaluate: expected {} to hold numbers", name));
      values.push_back(e.get<double>());
    }
  }
  return reel::tensor(values, {static_cast<int64_t>(v.size()), static_cast<int64_t>(cols)});
}
Tensor input_tensor(const json& input, const char* name) { return tensor_of(field(input, name), name); }

json scalar_json(const Tensor& t) { return t.item(); }
json vector_json(const Tensor& t) { return t.values(); }
json matrix_json(const Tensor& t) {
  const auto v = t.values();
  const int64_t rows = t.shape().at(0), cols = t.numel() / std::max<int64_t>(rows, 1);
  json out = json::array();
  for (int64_t r = 0; r < rows; ++r)
    out.push_back(std::vector<double>(v.begin() + r * cols, v.begin() + (r + 1) * cols));
  return out;
}

}  // namespace gradbench::evals
