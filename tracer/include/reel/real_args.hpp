#pragma once
// Arguments for a function whose parameters are Reals (reel/real.hpp): what a caller may
// give for such a parameter, and the adapter that converts it where f is called.
//
// For a parameter that is a Real, a std::vector, std::array or std::span of Reals, or an
// Eigen matrix of Reals (reel/eigen.hpp), a caller may give the same type, a tensor (one
// element for a Real, any shape with as many elements for a vector or span; an array's or
// a fixed-size matrix's number of elements; a matrix's [rows, cols]), or numbers: a
// number, a std::vector or std::array of numbers, an Eigen matrix of doubles. Numbers
// are made a tensor (real_number_arg) before tracing, so they are differentiated as a
// tensor argument is; a tensor becomes the parameter's type when f is called
// (RealParams), its elements read from the (traced) tensor. Gradients are then shaped
// like what was given: a tensor for a tensor or numbers, the Real type for a Real type.
//
// f's parameter types are known for a function, a function pointer, a std::function and
// a lambda or functor with one, non-template, operator(); a generic lambda (auto
// parameters) gets its arguments as they are given.
#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "reel/real.hpp"
#include "reel/thread_object.hpp"

namespace reel {

namespace detail {
// Element i (row-major) of the f64 tensor t set to fill(i).
template <class Fill>
void fill_f64(Tensor& t, Fill fill) {
  double* p = t.mutable_data<double>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<double>(fill(i));
}
// An f64 tensor of this shape whose element i (row-major) is fill(i), made in place: no
// vector of numbers first (numbers are given for Reals on every call of a cached function).
template <class Fill>
Tensor f64_tensor(Shape shape, Fill fill) {
  Tensor t(DType::f64, std::move(shape));
  fill_f64(t, fill);
  return t;
}
// The same numbers written into t when it is an f64 tensor of `shape` that nothing else
// holds (a tensor kept for the next call's arguments); false, writing nothing, otherwise.
template <class Fill>
bool refill_f64(Tensor& t, std::initializer_list<int64_t> shape, Fill fill) {
  if (!t.defined() || t.dtype() != DType::f64 || !std::equal(shape.begin(), shape.end(), t.shape().begin(), t.shape().end()) ||
      !t.unshared())
    return false;
  fill_f64(t, fill);
  return true;
}
}  // namespace detail

// Specialise for a type of numbers that may be given for a parameter of Reals (Eigen
// matrices of doubles: reel/eigen.hpp): value = true and static Tensor to_tensor(const T&);
// optionally static bool refill(Tensor& t, const T&), which writes the numbers into a
// tensor kept from the last call if it has their shape (detail::refill_f64).
template <class T>
struct real_number_arg : std::false_type {};
template <class N>
  requires std::is_arithmetic_v<N>
struct real_number_arg<N> : std::true_type {
  static Tensor to_tensor(N x) { return scalar(static_cast<double>(x)); }
  static bool refill(Tensor& t, N x) {
    return detail::refill_f64(t, {}, [&](int64_t) { return x; });
  }
};
template <class N, class A>
  requires std::is_arithmetic_v<N>
struct real_number_arg<std::vector<N, A>> : std::true_type {
  static Tensor to_tensor(const std::vector<N, A>& x) {
    return detail::f64_tensor({static_cast<int64_t>(x.size())}, [&](int64_t i) { return x[static_cast<std::size_t>(i)]; });
  }
  static bool refill(Tensor& t, const std::vector<N, A>& x) {
    return detail::refill_f64(t, {static_cast<int64_t>(x.size())}, [&](int64_t i) { return x[static_cast<std::size_t>(i)]; });
  }
};
template <class N, std::size_t K>
  requires std::is_arithmetic_v<N>
struct real_number_arg<std::array<N, K>> : std::true_type {
  static Tensor to_tensor(const std::array<N, K>& x) {
    return detail::f64_tensor({static_cast<int64_t>(K)}, [&](int64_t i) { return x[static_cast<std::size_t>(i)]; });
  }
  static bool refill(Tensor& t, const std::array<N, K>& x) {
    return detail::refill_f64(t, {static_cast<int64_t>(K)}, [&](int64_t i) { return x[static_cast<std::size_t>(i)]; });
  }
};

// A parameter type of Reals made from a tensor (its elements in row-major order):
// value = true and static T from_tensor(const Tensor&). A std::span of Reals is made a
// std::vector of them, which it views.
template <class T>
struct real_param : std::false_type {};
// Every packed leaf of Reals (Real, std::vector and std::array of them, Eigen matrices of
// them): its value made of the tensor's elements, as packed_leaf unpacks them.
template <class T>
  requires packed_leaf<T>::value
struct real_param<T> : std::true_type {
  static T from_tensor(const Tensor& t) {
    T x{};
    packed_leaf<T>::unpack(t, x);
    return x;
  }
};
template <class R, std::size_t E>
  requires std::is_same_v<std::remove_const_t<R>, Real>
struct real_param<std::span<R, E>> : std::true_type {
  static std::vector<Real> from_tensor(const Tensor& t) { return detail::real_elements(t); }
};

namespace detail {

// f's parameter types, where they are known.
template <class F, class = void>
struct params_of {
  static constexpr bool known = false;
};
template <class R, class... P>
struct params_of<R (*)(P...), void> {
  static constexpr bool known = true;
  using type = std::tuple<P...>;
};
template <class R, class... P>
struct params_of<R (*)(P...) noexcept, void> : params_of<R (*)(P...)> {};
template <class C, class R, class... P>
struct params_of<R (C::*)(P...) const, void> : params_of<R (*)(P...)> {};
template <class C, class R, class... P>
struct params_of<R (C::*)(P...), void> : params_of<R (*)(P...)> {};
template <class C, class R, class... P>
struct params_of<R (C::*)(P...) const noexcept, void> : params_of<R (*)(P...)> {};
template <class C, class R, class... P>
struct params_of<R (C::*)(P...) noexcept, void> : params_of<R (*)(P...)> {};
template <class F>
struct params_of<F, std::void_t<decltype(&F::operator())>> : params_of<decltype(&F::operator())> {};

template <class P>
using param_value_t = std::remove_cvref_t<P>;

// Whether f (decayed) has a known parameter list with a parameter of Reals.
template <class F>
constexpr bool takes_reals() {
  using D = std::decay_t<F>;
  if constexpr (!params_of<D>::known) return false;
  else
    return []<class... P>(std::tuple<P...>*) {
      return (real_param<param_value_t<P>>::value || ...);
    }(static_cast<typename params_of<D>::type*>(nullptr));
}

// The I-th parameter type of f, decayed (void past the end).
template <class F, std::size_t I>
auto param_type_probe() {
  using T = typename params_of<std::decay_t<F>>::type;
  if constexpr (I < std::tuple_size_v<T>) return std::type_identity<param_value_t<std::tuple_element_t<I, T>>>{};
  else return std::type_identity<void>{};
}
template <class F, std::size_t I>
using param_t = typename decltype(param_type_probe<F, I>())::type;

// An argument as the API traces it: numbers given for a parameter of Reals become a
// tensor; anything else is passed on as it is.
template <class P, class A>
decltype(auto) real_number_arg_for(const A& a) {
  if constexpr (real_param<P>::value && real_number_arg<A>::value) return real_number_arg<A>::to_tensor(a);
  else return (a);
}

// A tensor as it is, or numbers as a tensor.
template <class A>
decltype(auto) as_tensor(const A& a) {
  if constexpr (std::is_same_v<A, Tensor>) return (a);
  else return real_number_arg<A>::to_tensor(a);
}

// An argument as f is called with it: a tensor for a parameter of Reals becomes that
// type; anything else is passed on as it is.
template <class P, class A>
decltype(auto) real_param_arg(const A& a) {
  if constexpr (real_param<P>::value && std::is_same_v<A, Tensor>) return real_param<P>::from_tensor(a);
  else return (a);
}

// f, callable with tensors where it takes Reals.
template <class F>
struct RealParams {
  mutable F f;  // (f's operator() may be a mutable lambda's)
  template <class... A>
  decltype(auto) operator()(const A&... a) const {
    return [&]<std::size_t... I>(std::index_sequence<I...>) -> decltype(auto) {
      return f(real_param_arg<param_t<F, I>>(a)...);
    }(std::index_sequence_for<A...>{});
  }
};

// f as a cached function keeps it: made callable with tensors where it takes Reals.
template <class F>
using callable_t = std::conditional_t<takes_reals<F>(), RealParams<std::decay_t<F>>, std::decay_t<F>>;
template <class F>
callable_t<F> real_callable(F&& f) {
  if constexpr (takes_reals<F>()) return RealParams<std::decay_t<F>>{std::forward<F>(f)};
  else return std::forward<F>(f);
}

template <class F>
struct is_real_params : std::false_type {};
template <class F>
struct is_real_params<RealParams<F>> : std::true_type {
  using inner = F;
};

// Whether a call of a cached function g (made from f by RealParams) gives numbers for
// one of f's parameters of Reals (they are made tensors before the call is keyed).
template <class G, class... A>
constexpr bool gives_numbers_for_reals() {
  if constexpr (!is_real_params<G>::value) return false;
  else
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return ((real_param<param_t<typename is_real_params<G>::inner, I>>::value && real_number_arg<A>::value) || ...);
    }(std::index_sequence_for<A...>{});
}
// then(args'...), args' the arguments with numbers for f's Reals made tensors.
template <class G, class Then, class... A>
decltype(auto) numbers_as_tensors(Then&& then, const A&... args) {
  using F = typename is_real_params<G>::inner;
  return [&]<std::size_t... I>(std::index_sequence<I...>) -> decltype(auto) {
    return std::forward<Then>(then)(real_number_arg_for<param_t<F, I>>(args)...);
  }(std::index_sequence_for<A...>{});
}

// numbers_as_tensors for a cached function called again and again: the numbers are
// written into tensors this thread kept from its last call of this signature of types
// (when nothing else holds them and their shapes match), so a call allocates nothing
// for them. A call made while the kept tensors are in use (f calling itself) makes new
// ones.
template <class P, class A>
decltype(auto) kept_number_arg(Tensor& kept, const A& a) {
  if constexpr (real_param<P>::value && real_number_arg<A>::value) {
    bool refilled = false;
    if constexpr (requires { real_number_arg<A>::refill(kept, a); }) refilled = real_number_arg<A>::refill(kept, a);
    if (!refilled) kept = real_number_arg<A>::to_tensor(a);
    return static_cast<const Tensor&>(kept);
  } else {
    return (a);
  }
}
template <class G, class... A>
struct KeptNumbers {
  std::array<Tensor, sizeof...(A)> tensors;
  bool busy = false;
};
template <class G, class Then, class... A>
decltype(auto) numbers_as_kept_tensors(Then&& then, const A&... args) {
  using F = typename is_real_params<G>::inner;
  KeptNumbers<G, A...>* kept = thread_object<KeptNumbers<G, A...>>();  // (null at the thread's end)
  if (kept == nullptr || kept->busy) return numbers_as_tensors<G>(std::forward<Then>(then), args...);
  kept->busy = true;
  struct Release {
    bool& busy;
    ~Release() { busy = false; }
  } release{kept->busy};
  return [&]<std::size_t... I>(std::index_sequence<I...>) -> decltype(auto) {
    return std::forward<Then>(then)(kept_number_arg<param_t<F, I>>(kept->tensors[I], args)...);
  }(std::index_sequence_for<A...>{});
}

// Calls `then(g, args'...)`: g is f made callable with tensors for its Reals, args' the
// arguments with numbers for Reals made tensors. Used by each entry point of the API:
//   if constexpr (detail::takes_reals<F>())
//     return detail::with_real_args(f, [](auto g, const auto&... a) { return grad(g, a...); }, args...);
template <class F, class Then, class... A>
decltype(auto) with_real_args(F&& f, Then&& then, const A&... args) {
  using G = RealParams<std::decay_t<F>>;
  G g{std::forward<F>(f)};
  return numbers_as_tensors<G>([&](const auto&... a) -> decltype(auto) { return std::forward<Then>(then)(std::move(g), a...); },
                               args...);
}

}  // namespace detail
}  // namespace reel
