#pragma once
// Structs of tensors: a user type becomes differentiable by listing its fields once,
// after its definition, at namespace scope in its own namespace:
//
//   struct Linear { Tensor W, b; };
//   REEL_FIELDS(Linear, W, b)
//
// Listed fields may be tensors, other listed structs, std::vector, std::array,
// std::pair, std::tuple, std::optional and std::map<std::string, T> of them, and
// plain values (numbers, enums, strings, std::function, pointers), which are carried
// along untouched. A type that is none of these is a compile-time error saying how to
// make it differentiable (REEL_FIELDS) or declare it plain (REEL_PLAIN(Type)).
//
// Each tensor in such a value has a path: "W", "layers.0.weight", "blocks.conv.b"
// (field names, indices, map keys, joined by dots), the field paths of Yota's
// GradientResult. Tracing, reel::grad/gradient/withgradient, reel::jit_grad /
// compile_grad (reel::simplegrad) and reel::jit walk arguments in this order;
// reel/tree.hpp flattens and rebuilds such values (tree_flatten, tree_unflatten).
#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "reel/tensor.hpp"

namespace reel {

// Specialise (or use REEL_PLAIN) to declare a type a plain value: carried along
// untouched, holding no tensors.
template <class T>
struct plain_type : std::false_type {};

// Specialise to make a type one leaf that packs into one tensor (reel::Real and
// containers of Reals, reel/real.hpp and reel/eigen.hpp): value = true, and
//   static Tensor pack(const T& x);            // x's values (or traced values) as one tensor
//   static void unpack(const Tensor& t, T& x); // x's elements from t (x keeps its sizes)
// Walks see the packed tensor in the value's place; a walk that changes it (tracing
// makes it an input, a gradient refills it) unpacks it back into the value.
template <class T>
struct packed_leaf : std::false_type {};

namespace detail {

template <class S, class M>
struct Field {
  const char* name;
  M S::*member;
};

// What REEL_FIELDS(S, ...) returns: S's fields. The owner type makes a struct derived
// from a listed one not count as listed (its own fields would be missed).
template <class S, class... F>
struct FieldList {
  using owner = S;
  std::tuple<F...> fields;
};
template <class S, class... F>
FieldList<S, F...> make_field_list(F... fields) {
  return {std::tuple<F...>(fields...)};
}

template <class T>
concept Described = requires {
  typename decltype(reel_fields(static_cast<const T*>(nullptr)))::owner;
} && std::is_same_v<typename decltype(reel_fields(static_cast<const T*>(nullptr)))::owner, T>;

template <class T> struct is_std_vector : std::false_type {};
template <class E, class A> struct is_std_vector<std::vector<E, A>> : std::true_type {};
template <class T> struct is_std_array : std::false_type {};
template <class E, std::size_t N> struct is_std_array<std::array<E, N>> : std::true_type {};
template <class T> struct is_std_tuple : std::false_type {};
template <class... E> struct is_std_tuple<std::tuple<E...>> : std::true_type {};
template <class A, class B> struct is_std_tuple<std::pair<A, B>> : std::true_type {};
template <class T> struct is_std_optional : std::false_type {};
template <class E> struct is_std_optional<std::optional<E>> : std::true_type {};
template <class T> struct is_string_map : std::false_type {};
template <class E, class C, class A> struct is_string_map<std::map<std::string, E, C, A>> : std::true_type {};
template <class T> struct is_std_function : std::false_type {};
template <class F> struct is_std_function<std::function<F>> : std::true_type {};

// (Pointers are handled in kind_of: plain unless they point at something holding tensors.)
template <class T>
constexpr bool is_plain_v = std::is_arithmetic_v<T> || std::is_enum_v<T> || std::is_member_pointer_v<T> ||
                            std::is_convertible_v<const T&, std::string_view> || std::is_null_pointer_v<T> ||
                            is_std_function<T>::value || plain_type<T>::value;

template <class T>
constexpr bool may_hold_tensors();

// What a type is to the walk; `unknown` is a compile-time error where it is walked.
enum class Kind { tensor, packed, described, sequence, tuple, optional, string_map, plain, unknown };

template <class T>
constexpr Kind kind_of() {
  using D = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) return Kind::tensor;
  else if constexpr (packed_leaf<D>::value) return Kind::packed;
  else if constexpr (std::is_pointer_v<D> && !std::is_convertible_v<const D&, std::string_view>) {
    // Plain (carried along) unless what it points at holds tensors, which a pointer
    // field would silently keep out of the gradient.
    using E = std::remove_cv_t<std::remove_pointer_t<D>>;
    if constexpr (std::is_void_v<E> || std::is_function_v<E>) return Kind::plain;
    else if constexpr (requires { sizeof(E); })  // (an incomplete type, FILE, a C handle: plain)
      return kind_of<E>() != Kind::unknown && may_hold_tensors<E>() ? Kind::unknown : Kind::plain;
    else return Kind::plain;
  } else if constexpr (Described<D>) return Kind::described;
  else if constexpr (is_plain_v<D>) return Kind::plain;
  else if constexpr (is_std_vector<D>::value || is_std_array<D>::value) return Kind::sequence;
  else if constexpr (is_std_tuple<D>::value) return Kind::tuple;
  else if constexpr (is_std_optional<D>::value) return Kind::optional;
  else if constexpr (is_string_map<D>::value) return Kind::string_map;
  else return Kind::unknown;
}

// Whether a value of type T may hold tensors (a tensor, a listed struct, or a
// container of such): arguments that may are differentiable; the others are plain.
template <class T>
constexpr bool may_hold_tensors() {
  using D = std::remove_cv_t<T>;
  constexpr Kind k = kind_of<D>();
  if constexpr (k == Kind::tensor || k == Kind::packed || k == Kind::described) return true;
  else if constexpr (k == Kind::sequence || k == Kind::optional) return may_hold_tensors<typename D::value_type>();
  else if constexpr (k == Kind::string_map) return may_hold_tensors<typename D::mapped_type>();
  else if constexpr (k == Kind::tuple)
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (may_hold_tensors<std::tuple_element_t<I, D>>() || ...);
    }(std::make_index_sequence<std::tuple_size_v<D>>{});
  else if constexpr (k == Kind::plain) return false;
  else return true;  // unknown: reported by the walk
}

template <class T>
inline constexpr bool always_false = false;

// Paths are built only when asked for.
struct NoFieldPath {
  void push(std::string_view) {}
  void pop() {}
  const std::string& str() const {
    static const std::string empty;
    return empty;
  }
};
class FieldPath {
 public:
  void push(std::string_view part) {
    sizes_.push_back(path_.size());
    if (!path_.empty()) path_ += '.';
    path_ += part;
  }
  void pop() {
    path_.resize(sizes_.back());
    sizes_.pop_back();
  }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
  std::vector<std::size_t> sizes_;
};

// Calls fn(tensor, path) for each tensor in x, in order (x const or not: fn gets
// `const Tensor&` or `Tensor&` accordingly).
template <class T, class P, class Fn>
void walk(T& x, P& path, Fn& fn) {
  using D = std::remove_cv_t<T>;
  constexpr Kind k = kind_of<D>();
  if constexpr (k == Kind::plain || (k != Kind::unknown && !may_hold_tensors<D>())) {
    // Holds no tensor (a number, a std::vector<int>, ...): a visitor may want it (the
    // cache key of reel::jit), the others skip it.
    if constexpr (requires { fn.plain(x); }) fn.plain(x);
  } else if constexpr (k == Kind::tensor) {
    fn(x, path.str());
  } else if constexpr (k == Kind::packed) {
    // A visitor that only counts or overwrites leaves (leaves_unread) gets an undefined
    // tensor: no packing; a leaf it leaves undefined is cleared (a TreeDef's skeleton).
    constexpr bool unread = requires { Fn::leaves_unread; };
    Tensor t;
    if constexpr (!unread) t = packed_leaf<D>::pack(x);
    if constexpr (std::is_const_v<T>) {
      // The tensor is a temporary: a visitor that keeps tensors' addresses takes it by
      // its `packed` member (to keep a copy) where it has one.
      if constexpr (requires { fn.packed(t); }) fn.packed(std::move(t));
      else fn(static_cast<const Tensor&>(t), path.str());
    } else {
      fn(t, path.str());
      if (t.defined()) packed_leaf<D>::unpack(t, x);
      else if constexpr (unread) x = D{};
    }
  } else if constexpr (k == Kind::described) {
    std::apply(
        [&](const auto&... field) {
          ((path.push(field.name), walk(x.*(field.member), path, fn), path.pop()), ...);
        },
        reel_fields(static_cast<const D*>(nullptr)).fields);
  } else if constexpr (k == Kind::sequence) {
    if constexpr (requires { fn.count(x.size()); }) fn.count(x.size());  // structure, for a cache key
    std::size_t i = 0;
    for (auto& e : x) {
      path.push(std::to_string(i++));
      walk(e, path, fn);
      path.pop();
    }
  } else if constexpr (k == Kind::tuple) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((path.push(std::to_string(I)), walk(std::get<I>(x), path, fn), path.pop()), ...);
    }(std::make_index_sequence<std::tuple_size_v<D>>{});
  } else if constexpr (k == Kind::optional) {
    if constexpr (requires { fn.count(std::size_t{1}); }) fn.count(x.has_value() ? 1 : 0);
    if (x.has_value()) walk(*x, path, fn);
  } else if constexpr (k == Kind::string_map) {
    if constexpr (requires { fn.count(x.size()); }) fn.count(x.size());
    for (auto& [key, e] : x) {
      if constexpr (requires { fn.plain(key); }) fn.plain(key);
      path.push(key);
      walk(e, path, fn);
      path.pop();
    }
  } else {
    static_assert(always_false<D>,
                  "reel: this type is not differentiable: list its fields once after its definition with "
                  "REEL_FIELDS(Type, field1, field2, ...) (tensor fields get gradients, other fields are carried "
                  "along; a struct derived from a listed one needs its own list), or declare it a plain value with "
                  "REEL_PLAIN(Type); a pointer to tensors cannot be differentiated through: hold the value");
  }
}

}  // namespace detail

// Calls fn(tensor) for each tensor in x, in walk order.
template <class T, class Fn>
void for_each_tensor(T& x, Fn&& fn) {
  detail::NoFieldPath path;
  auto f = [&](auto& t, const std::string&) { fn(t); };
  detail::walk(x, path, f);
}

namespace detail {
// for_each_tensor for a visitor that does not read the tensors' values, only counts or
// replaces them: a packed leaf (reel::Real and its containers) is not packed for it.
template <class Fn>
struct UnreadLeaves {
  static constexpr bool leaves_unread = true;
  Fn& fn;
  template <class Ten>
  void operator()(Ten& t, const std::string&) { fn(t); }
};
template <class T, class Fn>
void for_each_unread_tensor(T& x, Fn&& fn) {
  NoFieldPath path;
  UnreadLeaves<std::remove_reference_t<Fn>> f{fn};
  walk(x, path, f);
}
}  // namespace detail

// The (path, tensor) pairs of x: ("layers.0.weight", ...); a lone tensor's path is "".
template <class T>
std::vector<std::pair<std::string, Tensor>> named_tensors(const T& x) {
  std::vector<std::pair<std::string, Tensor>> out;
  detail::FieldPath path;
  auto f = [&](const Tensor& t, const std::string& p) { out.emplace_back(p, t); };
  detail::walk(x, path, f);
  return out;
}

// The tensors of x, in walk order.
template <class T>
std::vector<Tensor> tensors_of(const T& x) {
  std::vector<Tensor> out;
  for_each_tensor(x, [&](const Tensor& t) { out.push_back(t); });
  return out;
}

}  // namespace reel

// REEL_FIELDS(Type, field...): see the top of this file. Up to 256 fields.
#define REEL_DETAIL_PARENS ()
#define REEL_DETAIL_EXPAND(...) REEL_DETAIL_EXPAND4(REEL_DETAIL_EXPAND4(REEL_DETAIL_EXPAND4(REEL_DETAIL_EXPAND4(__VA_ARGS__))))
#define REEL_DETAIL_EXPAND4(...) REEL_DETAIL_EXPAND3(REEL_DETAIL_EXPAND3(REEL_DETAIL_EXPAND3(REEL_DETAIL_EXPAND3(__VA_ARGS__))))
#define REEL_DETAIL_EXPAND3(...) REEL_DETAIL_EXPAND2(REEL_DETAIL_EXPAND2(REEL_DETAIL_EXPAND2(REEL_DETAIL_EXPAND2(__VA_ARGS__))))
#define REEL_DETAIL_EXPAND2(...) REEL_DETAIL_EXPAND1(REEL_DETAIL_EXPAND1(REEL_DETAIL_EXPAND1(REEL_DETAIL_EXPAND1(__VA_ARGS__))))
#define REEL_DETAIL_EXPAND1(...) __VA_ARGS__
#define REEL_DETAIL_FOR_EACH(macro, T, ...) __VA_OPT__(REEL_DETAIL_EXPAND(REEL_DETAIL_FOR_EACH_STEP(macro, T, __VA_ARGS__)))
#define REEL_DETAIL_FOR_EACH_STEP(macro, T, a, ...) \
  macro(T, a) __VA_OPT__(, REEL_DETAIL_FOR_EACH_AGAIN REEL_DETAIL_PARENS(macro, T, __VA_ARGS__))
#define REEL_DETAIL_FOR_EACH_AGAIN() REEL_DETAIL_FOR_EACH_STEP
#define REEL_DETAIL_FIELD(T, f) ::reel::detail::Field<T, decltype(T::f)>{#f, &T::f}

#define REEL_FIELDS(Type, ...)                                              \
  [[maybe_unused]] inline auto reel_fields(const Type*) {                   \
    return ::reel::detail::make_field_list<Type>(REEL_DETAIL_FOR_EACH(REEL_DETAIL_FIELD, Type, __VA_ARGS__)); \
  }

#define REEL_PLAIN(Type)                           \
  template <>                                      \
  struct reel::plain_type<Type> : std::true_type {};
