#pragma once
// The templates of reel/jit.hpp (include that): a call of a cached function makes its
// key and hands JitCore::call how to trace f (and for jit_grad, its gradient tape) and
// how to build its result.
#include <array>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "reel/jit_core.hpp"
#include "reel/detail/jit_key.hpp"
#include "reel/grad.hpp"
#include "reel/passes.hpp"
#include "reel/play.hpp"
#include "reel/trace.hpp"
#include "reel/tree.hpp"

namespace reel {

namespace detail {

// A hit's result: its outputs rebuilt with the structure of the traced result.
template <class R>
R unflatten_hit(const JitCore::Hit& hit) {
  return static_cast<const TreeDef<R>*>(hit.structure)->unflatten(hit.outputs);
}

// f traced on a cached call's arguments, for a miss: its values read become guards
// (the path is for those values).
template <class F, class... A>
auto trace_for_cache(const F& f, TraceScope& scope, const A&... args) {
  std::tuple<decltype(scope.wrap(args))...> wrapped{scope.wrap(args)...};
  return std::apply(f, wrapped);
}

}  // namespace detail

// Through the cache (JitCore::call). Called inside another trace (a jit function
// calling one, reel::grad of one), f runs as it is, so the outer trace records its
// operations and guards. A miss traces f, its result's leaves the tape's outputs; the
// path keeps the result's structure (TreeDef) to rebuild its hits.
template <class F>
template <class... A>
auto JitFunction<F>::operator()(const A&... args) const {
  if constexpr (detail::gives_numbers_for_reals<F, A...>()) {
    return detail::numbers_as_kept_tensors<F>([this](const auto&... a) { return (*this)(a...); }, args...);
  } else {
    using R = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
    const auto tensors = detail::tensor_pointers(args...);
    CacheKey key;
    Tensor one;  // one output: a hit writes it here, no vector
    const std::span<Tensor> out = std::is_same_v<R, Tensor> ? std::span<Tensor>(&one, 1) : std::span<Tensor>();
    std::vector<Tensor> leaves;  // a miss's result, as traced
    std::shared_ptr<const TreeDef<R>> structure;
    CachedCall call{.hit = [&](const JitCore::Hit& hit) {
                      if constexpr (std::is_same_v<R, Tensor>) return R(std::move(one));
                      else return detail::unflatten_hit<R>(hit);
                    },
                    .uncached = [&] { return R(this->f_(args...)); },
                    .describe = [&] { return detail::describe_args(args...); },
                    .trace =
                        [&] {
                          detail::TraceScope scope(false, /*value_guards=*/true);
                          const R result = detail::trace_for_cache(this->f_, scope, args...);
                          scope.output_tree(result);
                          auto [traced, def] = tree_flatten(result);
                          leaves = std::move(traced);
                          structure = std::make_shared<const TreeDef<R>>(std::move(def));
                          return NewPath{scope.finish(), structure};
                        },
                    .traced =
                        [&] {
                          for (Tensor& t : leaves) t.clear_trace_tags();
                          return structure->unflatten(leaves);
                        }};
    const auto key_of = [&] {
      detail::make_key(key, args...);
      return key.view();
    };
    return this->core_->call(key_of, tensors, out, call);
  }
}

template <class F>
template <class... A>
auto CachedGrad<F>::operator()(const A&... args) const {
  if constexpr (detail::gives_numbers_for_reals<F, A...>()) {
    return detail::numbers_as_kept_tensors<F>([this](const auto&... a) { return (*this)(a...); }, args...);
  } else {
    const auto tensors = detail::tensor_pointers(args...);
    if constexpr (detail::only_tensors_and_plain<A...>()) {
      constexpr std::size_t T = detail::count_tensors<A...>();
      // The value and the tensor arguments' gradients; written straight into the
      // result when every argument is a tensor.
      std::array<Tensor, sizeof...(A) + 1> result;
      std::array<Tensor, T + 1> spare;
      const std::span<Tensor> outs =
          T == sizeof...(A) ? std::span<Tensor>(result.data(), T + 1) : std::span<Tensor>(spare);
      fill(outs, tensors, args...);
      if constexpr (T != sizeof...(A)) {  // spread the gradients over all argument positions
        result[0] = std::move(spare[0]);
        std::size_t next = 1, at = 1;
        ((result[at++] = std::is_same_v<std::decay_t<A>, Tensor> ? std::move(spare[next++]) : Tensor()), ...);
      }
      return result;
    } else {
      std::vector<Tensor> outs(tensors.size() + 1);
      fill(outs, tensors, args...);
      return detail::gradients_of(outs, args...);
    }
  }
}

// The value and the gradients of the tensors (in walk order) into `outs`, through the
// cache (JitCore::call); inside another trace, uncached and recorded on it. A miss
// traces f's gradient tape, simplified; its first call compiled (compile_after 1) or
// interpreted.
template <class F>
template <class... A>
void CachedGrad<F>::fill(std::span<Tensor> outs, std::span<const Tensor* const> tensors, const A&... args) const {
  CacheKey key;
  CachedCall call{
      .hit = [](const JitCore::Hit&) {},
      .uncached =
          [&] { detail::move_outputs(play(grad_tape(trace(this->f_, args...)), detail::tensor_list(tensors)), outs); },
      .describe = [&] { return detail::describe_args(args...); },
      .trace =
          [&] {
            Tape g = grad_tape([&] {
              detail::TraceScope scope(false, /*value_guards=*/true);
              scope.output_tree(detail::trace_for_cache(this->f_, scope, args...));
              return scope.finish();
            }());
            return NewPath{std::move(g), nullptr, outs};
          },
      .traced = [] {}};
  const auto key_of = [&] {
    detail::make_key(key, args...);
    return key.view();
  };
  this->core_->call(key_of, tensors, outs, call);
}

}  // namespace reel
