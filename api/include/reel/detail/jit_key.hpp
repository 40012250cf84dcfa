#pragma once
// The cache key of a call of reel::jit / reel::simplegrad(f) (part of reel/jit.hpp;
// reel/simplegrad.hpp checks its arguments with it too). A key is the bytes of each
// argument's part, built on the stack: a tag, then fixed-size fields (a tensor's dtype,
// rank and dims; a plain value's type and bytes; a string's length then its bytes), so
// parts never run together. describe_args gives the parts as text, for explaining misses.
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "reel/fields.hpp"
#include "reel/jit_core.hpp"
#include "reel/shape.hpp"

namespace reel::detail {

// Plain values a key can hold: numbers, enums, strings, pointers (by address), and
// vectors, arrays, optionals, pairs, tuples and string maps of them.
template <class P>
constexpr bool keyable() {
  using D = std::remove_cv_t<P>;
  if constexpr (std::is_arithmetic_v<D> || std::is_enum_v<D> || std::is_pointer_v<D> || std::is_null_pointer_v<D> ||
                std::is_convertible_v<const D&, std::string_view>)
    return true;
  else if constexpr (is_std_vector<D>::value || is_std_array<D>::value || is_std_optional<D>::value)
    return keyable<typename D::value_type>();
  else if constexpr (is_string_map<D>::value) return keyable<typename D::mapped_type>();
  else if constexpr (is_std_tuple<D>::value)
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (keyable<std::tuple_element_t<I, D>>() && ...);
    }(std::make_index_sequence<std::tuple_size_v<D>>{});
  else return false;
}

template <class P>
void append_plain(CacheKey& key, const P& a) {
  using D = std::remove_cv_t<P>;
  if constexpr (std::is_same_v<D, bool>) {
    key.put('b');
    key.put(static_cast<uint8_t>(a));
  } else if constexpr (std::is_enum_v<D>) {  // the type too: two enums with equal values differ
    const char* name = typeid(D).name();
    key.put('e');
    key.put(std::strlen(name));
    key.append(name, std::strlen(name));
    key.put(static_cast<std::underlying_type_t<D>>(a));
  } else if constexpr (std::is_integral_v<D>) {  // the type too: 1 as int and as long differ
    key.put(std::is_signed_v<D> ? 'i' : 'u');
    key.put(static_cast<uint8_t>(sizeof(D)));
    key.put(a);
  } else if constexpr (std::is_floating_point_v<D>) {  // the bits: -0.0 and 0.0 differ, as do NaNs
    key.put('f');
    key.put(static_cast<uint8_t>(sizeof(D)));
    if constexpr (std::is_same_v<D, long double> && std::numeric_limits<long double>::digits == 64)
      key.append(&a, 10);  // x87's 80 bits; the rest of its 16 bytes is padding
    else
      key.put(a);
  } else if constexpr (std::is_pointer_v<std::decay_t<D>> &&
                       std::is_same_v<std::remove_cv_t<std::remove_pointer_t<std::decay_t<D>>>, char>) {
    if (a == nullptr) {
      key.put('z');  // a null string
    } else {
      const std::string_view v(a);
      key.put('s');
      key.put(v.size());
      key.append(v.data(), v.size());
    }
  } else if constexpr (std::is_pointer_v<D> || std::is_null_pointer_v<D>) {
    key.put('p');
    key.put(reinterpret_cast<std::uintptr_t>(static_cast<const void*>(a)));
  } else if constexpr (std::is_convertible_v<const D&, std::string_view>) {
    const std::string_view v(a);
    key.put('s');
    key.put(v.size());
    key.append(v.data(), v.size());
  } else if constexpr (is_std_vector<D>::value || is_std_array<D>::value) {
    key.put('v');
    key.put(a.size());
    for (const auto& e : a) append_plain(key, e);
  } else if constexpr (is_std_optional<D>::value) {
    key.put('o');
    key.put(static_cast<uint8_t>(a.has_value()));
    if (a.has_value()) append_plain(key, *a);
  } else if constexpr (is_string_map<D>::value) {
    key.put('m');
    key.put(a.size());
    for (const auto& [k, v] : a) append_plain(key, k), append_plain(key, v);
  } else if constexpr (is_std_tuple<D>::value) {
    key.put('t');
    std::apply([&](const auto&... e) { (append_plain(key, e), ...); }, a);
  } else {
    key.put('?');  // not part of the key (std::function, REEL_PLAIN types): documented
  }
}

template <class T>
void append_key(CacheKey& key, const T& a);

// Appends a struct's parts (see append_key).
struct KeyVisitor {
  CacheKey& key;
  void operator()(const Tensor& t, const std::string&) { append_key(key, t); }
  void count(std::size_t n) {
    key.put('n');
    key.put(n);
  }
  template <class P>
  void plain(const P& p) {
    append_plain(key, p);
  }
};

// One address per type (an inline variable is one object in the whole program): a
// key part starts with its argument's type, so that arguments of different types
// (a generic function is called with many) never share bytes.
template <class T>
inline constexpr char type_tag = 0;

template <class T>
void append_key(CacheKey& key, const T& a) {
  using D = std::decay_t<T>;
  if constexpr (!std::is_same_v<D, Tensor>) key.put(static_cast<const void*>(&type_tag<D>));
  if constexpr (std::is_same_v<D, Tensor>) {
    if (!a.defined()) throw Error("jit: an argument holds an undefined tensor");
    key.put('T');
    key.put(static_cast<uint8_t>(a.dtype()));
    key.put(static_cast<uint64_t>(a.shape().size()));
    if (!a.shape().empty()) key.append(a.shape().data(), a.shape().size() * sizeof(int64_t));
  } else if constexpr (may_hold_tensors<D>()) {  // a struct or container of tensors
    // Its type, its tensors' types, its containers' sizes and its plain values; plain
    // fields that cannot be keyed (std::function, REEL_PLAIN types) are not part of it.
    key.put('{');  // (its type: the tag above)
    KeyVisitor v{key};
    NoFieldPath path;
    walk(a, path, v);
    key.put('}');
  } else if constexpr (keyable<D>()) {
    append_plain(key, a);
  } else {
    static_assert(std::is_same_v<D, Tensor>,
                  "reel::jit: arguments are Tensors, structs of them (REEL_FIELDS), containers, integers, doubles, "
                  "bools, enums, strings and containers of them; pass other values through a lambda's capture (they "
                  "become constants of the trace)");
  }
}

// An argument's part of the key as text, for explaining misses (made on misses only).
template <class T>
std::string describe_arg(const T& a) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) {
    return fmt::format("tensor {}", type_str(a.dtype(), a.shape()));
  } else if constexpr (std::is_same_v<D, bool>) {
    return a ? "bool true" : "bool false";
  } else if constexpr (std::is_enum_v<D>) {
    return fmt::format("enum {} {}", typeid(D).name(), static_cast<long long>(a));
  } else if constexpr (std::is_integral_v<D>) {
    return fmt::format("integer {}{} {}", std::is_signed_v<D> ? 'i' : 'u', 8 * sizeof(D), a);
  } else if constexpr (std::is_floating_point_v<D>) {
    return fmt::format("number f{} {}", 8 * sizeof(D), a);  // shortest text that reads back as the same value
  } else if constexpr (std::is_pointer_v<D> && std::is_same_v<std::remove_cv_t<std::remove_pointer_t<D>>, char>) {
    return a == nullptr ? std::string("string null") : fmt::format("string \"{}\"", std::string_view(a));
  } else if constexpr (std::is_convertible_v<const D&, std::string_view>) {
    return fmt::format("string \"{}\"", std::string_view(a));
  } else if constexpr (may_hold_tensors<D>()) {
    std::string out;
    for (const auto& [path, t] : named_tensors(a))
      out += fmt::format("{}{} {}", out.empty() ? "" : ", ", path.empty() ? "-" : path, type_str(t.dtype(), t.shape()));
    return fmt::format("struct {{{}}}", out);
  } else {
    return "a value";
  }
}

template <class... A>
std::vector<std::string> describe_args(const A&... args) {
  return {describe_arg(args)...};
}

template <class... A>
void make_key(CacheKey& key, const A&... args) {
  (append_key(key, args), ...);
}

}  // namespace reel::detail
