#pragma once
// The templates of reel/jit.hpp (include that): a call of a cached function looks its
// key up in the JitCore, and on a miss traces f (and for jit_grad, its gradient tape)
// under the miss lock and adds the path.
#include <array>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "reel/detail/jit_core.hpp"
#include "reel/detail/jit_key.hpp"
#include "reel/grad.hpp"
#include "reel/passes.hpp"
#include "reel/play.hpp"
#include "reel/trace.hpp"
#include "reel/tree.hpp"

namespace reel {

namespace detail {

// What the looks of one call share (JitCore::Look): the paths tried, the guards failed.
struct CallLooks {
  std::vector<std::shared_ptr<const void>> tried;
  std::string failed;
  JitCore::Look look(std::span<Tensor> out = {}, const std::vector<std::string>* parts = nullptr) {
    return {.out = out, .final = parts != nullptr, .tried = &tried, .failed = &failed, .parts = parts};
  }
};

// A hit's result: its outputs rebuilt with the structure of the traced result.
template <class R>
R unflatten_hit(const JitCore::Hit& hit) {
  return static_cast<const TreeDef<R>*>(hit.structure.get())->unflatten(hit.outputs);
}

}  // namespace detail

template <class F>
template <class... A>
auto JitFunction<F>::operator()(const A&... args) const {
  using R = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
  const auto tensors = detail::tensor_pointers(args...);
  // Called inside another trace (a jit function calling one, reel::grad of one): no
  // cache; f runs as it is, so the outer trace records its operations and guards.
  if (detail::any_traced(tensors)) return R(f_(args...));
  detail::KeyBuffer key;
  detail::make_key(key, args...);
  detail::CallLooks looks;
  if constexpr (std::is_same_v<R, Tensor>) {  // one output: no vector on a hit
    Tensor out;
    if (core_->run(key.view(), tensors, looks.look(std::span<Tensor>(&out, 1)))) return out;
  } else if (auto hit = core_->run(key.view(), tensors, looks.look())) {
    return detail::unflatten_hit<R>(*hit);
  }
  const auto lock = core_->miss_lock();
  std::vector<std::string> parts = detail::describe_args(args...);
  if (auto hit = core_->run(key.view(), tensors, looks.look({}, &parts)))
    return detail::unflatten_hit<R>(*hit);  // another thread traced it
  return trace_path<R>(key.view(), std::move(parts), args...);
}

// A miss: f traced on these arguments, its result's leaves the tape's outputs; the
// path keeps the result's structure (TreeDef) to rebuild its hits.
template <class F>
template <class R, class... A>
R JitFunction<F>::trace_path(std::string_view key, std::vector<std::string> parts, const A&... args) const {
  detail::TraceScope scope(false, /*value_guards=*/true);
  std::tuple<decltype(scope.wrap(args))...> wrapped{scope.wrap(args)...};
  const R result = std::apply(f_, wrapped);
  scope.output_tree(result);
  auto [leaves, def] = tree_flatten(result);
  auto structure = std::make_shared<const TreeDef<R>>(std::move(def));
  core_->add(key, std::move(parts), scope.finish(), structure);
  for (Tensor& t : leaves) t.clear_trace_tags();
  return structure->unflatten(leaves);
}

template <class F>
template <class... A>
auto CachedGrad<F>::operator()(const A&... args) const {
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

// The value and the gradients of the tensors (in walk order) into `outs`.
template <class F>
template <class... A>
void CachedGrad<F>::fill(std::span<Tensor> outs, std::span<const Tensor* const> tensors, const A&... args) const {
  if (detail::any_traced(tensors)) {  // inside another trace: no cache, recorded on it
    detail::move_outputs(play(grad_tape(trace(f_, args...)), detail::tensor_list(tensors)), outs);
    return;
  }
  detail::KeyBuffer key;
  detail::make_key(key, args...);
  detail::CallLooks looks;
  if (core_->run(key.view(), tensors, looks.look(outs))) return;
  const auto lock = core_->miss_lock();
  std::vector<std::string> parts = detail::describe_args(args...);
  if (core_->run(key.view(), tensors, looks.look(outs, &parts))) return;
  trace_path(key.view(), std::move(parts), outs, tensors, args...);
}

// A miss: f's gradient tape, traced on these arguments and simplified; its first call
// compiled (compile_after 1) or interpreted.
template <class F>
template <class... A>
void CachedGrad<F>::trace_path(std::string_view key, std::vector<std::string> parts, std::span<Tensor> outs,
                               std::span<const Tensor* const> tensors, const A&... args) const {
  Tape g = grad_tape([&] {
    detail::TraceScope scope(false, /*value_guards=*/true);
    std::tuple<decltype(scope.wrap(args))...> wrapped{scope.wrap(args)...};
    scope.output_tree(std::apply(f_, wrapped));
    return scope.finish();
  }());
  core_->add(key, std::move(parts), std::move(g), nullptr, tensors, outs);
}

}  // namespace reel
