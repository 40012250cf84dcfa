#pragma once
// Zygote's and Yota's gradients of structs, and implicit parameters:
//
//   auto [dm, dx] = reel::gradient(loss, m, x);        // one gradient per argument, of its type
//   auto [val, g] = reel::withgradient(loss, m, x);    // the value too; g is that tuple
//   reel::update(m, dm, [](const Tensor& x, const Tensor& dx) { return x - 0.01 * dx; });
//
//   reel::Params ps{W, b};                              // captured tensors made inputs
//   auto g = reel::gradient([&] { return reel::sum(predict(x)); }, ps);
//   g[W], g[b];
//
// An argument's gradient has the argument's own type: a Tensor for a tensor, a Linear
// (REEL_FIELDS, reel/fields.hpp) whose tensor fields hold the gradients and whose
// other fields are copied, a std::vector of those for a std::vector, and so on; a
// plain argument (a number, a string) gets reel::NoGradient. Computed by tracing f
// and playing its gradient tape (the interpreter, like reel::grad).
#include <fmt/format.h>

#include <functional>
#include <initializer_list>
#include <tuple>
#include <vector>

#include "reel/fields.hpp"
#include "reel/grad.hpp"

namespace reel {

template <class F, class... A>
auto withgradient(F&& f, const A&... args) {
  if constexpr (detail::takes_reals<F>()) {
    return detail::with_real_args(
        std::forward<F>(f), [](auto g, const auto&... a) { return withgradient(std::move(g), a...); }, args...);
  } else {
    const detail::Traced t = detail::trace_lifting(true, std::forward<F>(f), args...);
    return detail::gradients_of(play_gradient(grad_tape(t.tape), detail::tensor_args(args...), t.captured), args...);
  }
}

template <class F, class... A>
auto gradient(F&& f, const A&... args) {
  return withgradient(std::forward<F>(f), args...).grad;
}

// reel::Params: tensors a function captures (by reference) that are to be inputs of
// its trace rather than constants. It refers to the variables listed, which must
// outlive it.
class Params {
 public:
  Params() = default;
  Params(std::initializer_list<std::reference_wrapper<Tensor>> tensors) {
    for (Tensor& t : tensors) push_back(t);
  }
  // A variable listed twice is a reel::Error (its gradient would be split).
  void push_back(Tensor& t);
  std::size_t size() const { return vars_.size(); }
  Tensor& operator[](std::size_t i) const { return *vars_.at(i); }
  auto begin() const { return vars_.begin(); }
  auto end() const { return vars_.end(); }

 private:
  std::vector<Tensor*> vars_;
};

// The gradients of a function with respect to Params, looked up by tensor: g[W].
class Grads {
 public:
  // W's gradient: W is one of the Params' variables (or a tensor sharing its memory).
  // A listed tensor f did not use has a zero gradient. Any other tensor is a
  // reel::Error: it was a constant of the trace.
  const Tensor& operator[](const Tensor& t) const;
  std::size_t size() const { return grads_.size(); }

 private:
  friend Grads make_grads(const Params& ps, std::vector<Tensor> grads);
  struct Entry {
    const Tensor* var;
    Tensor value;  // holds its memory, so that no other tensor can take its address
  };
  std::vector<Entry> vars_;
  std::vector<Tensor> grads_;
};
Grads make_grads(const Params& ps, std::vector<Tensor> grads);

struct ParamsGradient {
  Tensor value;
  Grads grad;
};

namespace detail {
// While it lives, each variable in `ps` holds a tensor traced as an input of `scope`
// (the same memory); the values before are put back after, also on an exception.
class ParamsAsInputs {
 public:
  ParamsAsInputs(TraceScope& scope, const Params& ps);
  ~ParamsAsInputs();
  ParamsAsInputs(const ParamsAsInputs&) = delete;
  ParamsAsInputs& operator=(const ParamsAsInputs&) = delete;

 private:
  const Params& ps_;
  std::vector<Tensor> saved_;
};
}  // namespace detail

template <class F>
ParamsGradient withgradient(F&& f, const Params& ps) {
  static_assert(std::is_invocable_v<F&>, "reel::gradient(f, params): f takes no arguments (it captures the params)");
  Tape tape;
  std::vector<Tensor> captured;
  {
    detail::TraceScope scope(true);
    {
      const detail::ParamsAsInputs inputs(scope, ps);
      scope.output_tree(f());
    }
    captured = scope.captured();
    tape = scope.finish();
  }
  std::vector<Tensor> in;
  for (Tensor* p : ps) in.push_back(detach(*p));
  std::vector<Tensor> outs = play_gradient(grad_tape(tape), std::move(in), captured);
  Tensor value = outs.at(0);
  outs.erase(outs.begin());
  return {value, make_grads(ps, std::move(outs))};
}

template <class F>
Grads gradient(F&& f, const Params& ps) {
  return withgradient(std::forward<F>(f), ps).grad;
}

// Yota's update!: each tensor field x of m becomes fn(x, dx), dx the same field of
// dm (a gradient of m's type, from reel::gradient). Fields whose dx is undefined are
// left as they are; m and dm must have the same structure (a reel::Error if not).
template <class T, class Fn>
void update(T& m, const T& dm, Fn&& fn) {
  static_assert(detail::may_hold_tensors<T>(), "reel::update: m holds no tensors");
  const std::vector<std::pair<std::string, Tensor>> d = named_tensors(dm), mine = named_tensors(m);
  if (d.size() != mine.size())
    throw Error(fmt::format("update: expected a gradient with m's {} tensors, got {}", mine.size(), d.size()));
  for (std::size_t i = 0; i < d.size(); ++i)
    if (d[i].first != mine[i].first)
      throw Error(fmt::format("update: expected a gradient of m's structure: tensor {} is {} in m, {} in the gradient",
                              i + 1, mine[i].first, d[i].first));
  std::size_t i = 0;
  for_each_tensor(m, [&](Tensor& x) {
    const Tensor& dx = d[i++].second;
    if (!dx.defined()) return;
    Tensor next = fn(static_cast<const Tensor&>(x), dx);
    if (!next.defined() || next.dtype() != x.dtype() || next.shape() != x.shape())
      throw Error(fmt::format("update: fn must keep each tensor's type: {} is {}, fn gave {}", d[i - 1].first,
                              type_str(x.dtype(), x.shape()),
                              next.defined() ? type_str(next.dtype(), next.shape()) : "an undefined tensor"));
    x = std::move(next);
  });
}

// The same for Params: each variable W becomes fn(W, g[W]).
template <class Fn>
void update(const Params& ps, const Grads& g, Fn&& fn) {
  std::vector<Tensor> next;
  for (Tensor* p : ps) next.push_back(fn(static_cast<const Tensor&>(*p), g[*p]));
  for (std::size_t i = 0; i < ps.size(); ++i) ps[i] = std::move(next[i]);
}

}  // namespace reel
