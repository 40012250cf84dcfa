#pragma once
// Cached functions for dynamic programs:
//   auto jf = reel::jit(f);          jf(args...) returns what f returns
//   auto g = reel::jit_grad(f);      auto [val, d1, ..., dn] = g(args...)   (old spelling: reel::simplegrad(f))
// Arguments are trees of tensors (reel/tree.hpp: tensors, REEL_FIELDS structs,
// containers) and plain values (integers, doubles, bools, enums, strings). The cache
// key is the tensors' dtypes and shapes plus the plain values (reel/detail/jit_key.hpp);
// tensors captured by f are constants of what was traced (pass a tensor as an argument
// if it changes). A miss traces f (a branch on a value records a guard), derives and
// simplifies (for jit_grad) and keeps the tape; the first call of a signature is
// interpreted, and its compile_after-th call compiles it. A hit runs the compiled (or
// interpreted) tape; if a guard fails, the next path cached for the signature is
// tried, and if none holds, the new path is traced and added: one signature can hold
// several paths. REEL_LOG=recompiles prints why each miss happened. The cache itself is
// reel::JitCore (reel/jit_core.hpp, api/src/jit.cpp), the engine of every cached front
// door.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reel/jit_core.hpp"

namespace reel {

// reel::jit(f): f(args...) through the cache. f returns a tree of tensors (a Tensor, a
// std::vector or tuple of them, a REEL_FIELDS struct, ...); a hit rebuilds it from the
// path's outputs with the structure of the traced result (its plain fields and sizes
// are those traced). Called inside another trace, f runs as it is.
namespace detail {
// What every cached function holds: f and its cache (its engine, named `what` in errors
// and the log).
template <class F>
class CachedFunction {
 public:
  CacheInfo cache_info() const { return core_->info(); }

 protected:
  CachedFunction(F f, JitOptions options, const char* what)
      : f_(std::move(f)), core_(std::make_shared<JitCore>(options, what)) {}
  F f_;
  std::shared_ptr<JitCore> core_;
};
}  // namespace detail

template <class F>
class JitFunction : public detail::CachedFunction<F> {
 public:
  JitFunction(F f, JitOptions options) : detail::CachedFunction<F>(std::move(f), options, "jit") {}
  template <class... A>
  auto operator()(const A&... args) const;
};

template <class F>
JitFunction<detail::callable_t<F>> jit(F&& f, JitOptions options = {}) {
  return JitFunction<detail::callable_t<F>>(detail::real_callable(std::forward<F>(f)), options);
}

// reel::jit_grad(f): the cached value and gradient of a scalar f. With tensor and plain
// arguments g(args...) returns std::array<Tensor, n + 1>: the value, then one gradient
// per argument (an undefined tensor for an argument that is not a tensor). With a
// struct or container argument it returns what reel::withgradient returns ({value,
// tuple of each argument's gradient of its own type}).
template <class F>
class CachedGrad : public detail::CachedFunction<F> {
 public:
  CachedGrad(F f, JitOptions options) : detail::CachedFunction<F>(std::move(f), options, "simplegrad") {}
  template <class... A>
  auto operator()(const A&... args) const;

 private:
  template <class... A>
  void fill(std::span<Tensor> outs, std::span<const Tensor* const> tensors, const A&... args) const;
};

template <class F>
CachedGrad<detail::callable_t<F>> jit_grad(F&& f, JitOptions options = {}) {
  return CachedGrad<detail::callable_t<F>>(detail::real_callable(std::forward<F>(f)), options);
}

// The old spelling of jit_grad (kept; reel/simplegrad.hpp's simplegrad(f, args...) is
// the old spelling of compile_grad).
template <class F>
CachedGrad<detail::callable_t<F>> simplegrad(F&& f, JitOptions options = {}) {
  return jit_grad(std::forward<F>(f), options);
}

}  // namespace reel

#include "reel/detail/jit_impl.hpp"
