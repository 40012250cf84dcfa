#pragma once
// Jacobians and Hessians (after jax.jacfwd, jacrev, jacobian, hessian and functorch's):
//
//   reel::Jacobian J = reel::jacobian(f, x);     // J.jacobian: shape f(x).shape + x.shape
//   reel::Hessian H = reel::hessian(loss, w);    // H.hessian: shape w.shape + w.shape
//   auto jf = reel::jit_jacobian(f);             // cached and compiled, like reel::jit_grad
//   reel::Jacobian J2 = jf(x2);
//
// Shapes: the block of output o (a leaf of f's result, walk order) with respect to
// argument tensor i (a tensor argument, or a leaf of a struct or container argument,
// walk order) has shape output shape + argument shape (JAX's convention):
// J.blocks[o][i][e..., a...] = d out_o[e...] / d arg_i[a...]. Several arguments or
// outputs give one block each; J.jacobian is blocks[0][0]. An i64 argument gets an
// undefined block (it has no derivative); outputs must be floating point.
//
// How: f is traced once; jacfwd batches its forward-mode tape over the n = total size of
// the arguments' identity seeds (one pass of jvp_tape(tape, n)); jacrev batches its
// vector-Jacobian tape over the m = total size of the outputs' identity seeds (one
// reverse pass, batched over m); jacobian picks forward when n <= m, else reverse.
// hessian of a scalar f is forward over reverse: the gradient tape's forward-mode tape,
// batched over the n identity seeds. The derived tape is played on the arguments, so
// these compose (jacobian of jacobian, grad of jacobian, vmap of jacobian) and record
// into enclosing traces. Called on their own they trace and derive on every call:
// reel::jit_jacobian(f) / jit_hessian(f) / jit_sparse_jacobian(f) keep the derived tape
// per signature (the cache of reel::jit_grad: same key, guards, compile_after and
// eviction) and compile it.
//
// Sparse Jacobians (after ADOL-C's compressed Jacobians with ColPack): for a Jacobian
// with known (or detected) zeros, the columns that share no row get one colour (greedy
// colouring of the column intersection graph, largest degree first), the p colours'
// seed vectors go through ONE forward pass batched over p (p is often a small constant,
// independent of the size), and each nonzero is read back from its column's colour:
//   reel::Sparsity s = reel::detect_sparsity(f, x);   // or built by hand
//   reel::SparseJacobian J = reel::sparse_jacobian(f, s, x);   // J.nonzeros: CSR order of *J.pattern
// Rows are the outputs' elements (all output leaves flattened and concatenated), columns
// the floating-point arguments' elements (likewise). detect_sparsity propagates NaN
// tangents: it runs the forward tape batched over the n columns (in chunks of 256) with
// NaN seeds, and an entry is nonzero where its tangent comes out NaN. NaN survives multiplication
// by zero, so a dependency through a coefficient that happens to be zero here still
// counts (the pattern is structural, not numerical); but a tangent rule that selects
// by the values (where, relu, clamp, a guard's branch) drops the branch not taken at
// these arguments: the pattern is that of this path at these values, and a piecewise
// function can have more nonzeros elsewhere (pass such a function's pattern by hand).
// Primal infinities can add spurious entries (safe: a superset only costs colours).
// Detection costs one dense forward Jacobian (n seeds): do it once, or give the pattern.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "reel/grad.hpp"
#include "reel/thread_object.hpp"
#include "reel/jit.hpp"
#include "reel/passes.hpp"
#include "reel/play.hpp"
#include "reel/trace.hpp"
#include "reel/tree.hpp"

namespace reel {

enum class JacobianMode { automatic, forward, reverse };

struct Jacobian {
  std::vector<Tensor> values;               // f's outputs (the leaves of its result)
  std::vector<std::vector<Tensor>> blocks;  // [output][argument tensor]: output shape + argument shape
  Tensor value;                             // values[0]
  Tensor jacobian;                          // blocks[0][0]
};

// The Hessian of a scalar f (0-d output), with its value and gradient (which come free).
struct Hessian {
  Tensor value;
  std::vector<Tensor> grads;                // one per argument tensor (undefined for i64 ones)
  std::vector<std::vector<Tensor>> blocks;  // [i][j]: d2 f / d arg_i d arg_j, shape arg_i + arg_j
  Tensor hessian;                           // blocks[0][0]
};

// A Jacobian's sparsity pattern: for each row (output element), its nonzero columns
// (argument elements).
struct Sparsity {
  int64_t rows = 0, cols = 0;
  std::vector<std::vector<int64_t>> row_cols;
  int64_t nnz() const;
  // The nonzeros of a 2-D tensor (e.g. a dense Jacobian reshaped to [rows, cols]).
  static Sparsity from_dense(const Tensor& matrix);
  // Throws reel::Error naming `op` unless the rows and columns are in range.
  void check(const char* op) const;
};

// A distance-1 colouring of the column intersection graph: columns that share a row
// get different colours. Greedy, columns in order of decreasing degree (ColPack's
// largest-first ordering).
struct Colouring {
  std::vector<int64_t> colour;  // per column, in [0, count)
  int64_t count = 0;
};
Colouring colour_columns(const Sparsity& pattern);

struct SparseJacobian {
  std::vector<Tensor> values;  // f's outputs
  std::shared_ptr<const Sparsity> pattern;  // shared with the cache (not copied per call)
  Tensor nonzeros;             // [nnz]: row by row, in the order of pattern.row_cols
  int64_t colours = 0;         // forward directions used (the batch of the one pass)
  Tensor dense() const;        // [rows, cols], zeros elsewhere (computed on the host)
};

namespace detail {

// What a derivation makes of f's traced tape (inputs: num_args argument tensors, then
// lifted captures): the derived tape, and what unpacking its outputs needs.
struct Derived {
  Tape tape;
  std::shared_ptr<const void> info;
};

// A derivation may also give `into`'s two halves (CachedDerivative::into): take(r, kept)
// lists where a kept result's tensors are, in the derived tape's output order, for the
// compiled code to write into where they are, with how many of r's tensors hold each
// one's memory (it and r's copies of it: Jacobian::value of values[0]); after a hit has
// written through those slots, put(r, kept, info) names r's second names again, or, if
// r's structure is not the hit's, gathers the outputs from the slots and makes
// r = unpack(outs, info).
struct JacobianDerivation {
  using Result = Jacobian;
  JacobianMode mode = JacobianMode::automatic;
  Derived derive(const Tape& f, std::size_t num_args, std::span<const Tensor> inputs) const;
  Jacobian unpack(std::vector<Tensor> outs, const void* info) const;
  void take(Jacobian& r, Recycle& kept) const;
  void put(Jacobian& r, Recycle& kept, const void* info) const;
  bool holds(const Jacobian& r, const Tensor* t) const;  // t is one of r's tensors
};

struct HessianDerivation {
  using Result = Hessian;
  Derived derive(const Tape& f, std::size_t num_args, std::span<const Tensor> inputs) const;
  Hessian unpack(std::vector<Tensor> outs, const void* info) const;
  void take(Hessian& r, Recycle& kept) const;
  void put(Hessian& r, Recycle& kept, const void* info) const;
  bool holds(const Hessian& r, const Tensor* t) const;
};

// Where `into` finds a kept result's tensors, per thread (reused, so a call allocates
// no vector). The slots point into the result's own containers, so they are filled,
// written and read back within one compiled run (reel::Recycle says when).
struct IntoScratch {
  Recycle kept;
  bool busy = false;
};

struct SparseDerivation {
  using Result = SparseJacobian;
  std::shared_ptr<const Sparsity> pattern;  // null: detected per signature
  Derived derive(const Tape& f, std::size_t num_args, std::span<const Tensor> inputs) const;
  SparseJacobian unpack(std::vector<Tensor> outs, const void* info) const;
};

Sparsity detect_sparsity(const Tape& f, std::size_t num_args, std::span<const Tensor> inputs);

// Traces f (captures of an enclosing trace lifted to inputs), derives, plays.
template <class D, class F, class... A>
typename D::Result derive_and_play(const D& d, F&& f, const A&... args) {
  static_assert(sizeof...(A) > 0, "reel::jacobian: f has no arguments, so there is nothing to differentiate");
  const Traced t = trace_lifting(true, std::forward<F>(f), args...);
  std::vector<Tensor> in = tensor_args(args...);
  const std::size_t n = in.size();
  for (const Tensor& c : t.captured) in.push_back(detach(c));
  Derived dv = d.derive(t.tape, n, in);
  return d.unpack(play(dv.tape, in), dv.info.get());
}

}  // namespace detail

template <class F, class... A>
Jacobian jacfwd(F&& f, const A&... args) {
  if constexpr (detail::takes_reals<F>()) {
    return detail::with_real_args(
        std::forward<F>(f), [](auto g, const auto&... a) { return jacfwd(std::move(g), a...); }, args...);
  } else {
    return detail::derive_and_play(detail::JacobianDerivation{JacobianMode::forward}, std::forward<F>(f), args...);
  }
}
template <class F, class... A>
Jacobian jacrev(F&& f, const A&... args) {
  if constexpr (detail::takes_reals<F>()) {
    return detail::with_real_args(
        std::forward<F>(f), [](auto g, const auto&... a) { return jacrev(std::move(g), a...); }, args...);
  } else {
    return detail::derive_and_play(detail::JacobianDerivation{JacobianMode::reverse}, std::forward<F>(f), args...);
  }
}
// Forward when the arguments' total size is at most the outputs', else reverse.
template <class F, class... A>
Jacobian jacobian(F&& f, const A&... args) {
  if constexpr (detail::takes_reals<F>()) {
    return detail::with_real_args(
        std::forward<F>(f), [](auto g, const auto&... a) { return jacobian(std::move(g), a...); }, args...);
  } else {
    return detail::derive_and_play(detail::JacobianDerivation{JacobianMode::automatic}, std::forward<F>(f), args...);
  }
}
template <class F, class... A>
Hessian hessian(F&& f, const A&... args) {
  if constexpr (detail::takes_reals<F>()) {
    return detail::with_real_args(
        std::forward<F>(f), [](auto g, const auto&... a) { return hessian(std::move(g), a...); }, args...);
  } else {
    return detail::derive_and_play(detail::HessianDerivation{}, std::forward<F>(f), args...);
  }
}
template <class F, class... A>
SparseJacobian sparse_jacobian(F&& f, const Sparsity& pattern, const A&... args) {
  if constexpr (detail::takes_reals<F>()) {
    return detail::with_real_args(
        std::forward<F>(f), [&](auto g, const auto&... a) { return sparse_jacobian(std::move(g), pattern, a...); }, args...);
  } else {
    return detail::derive_and_play(detail::SparseDerivation{std::make_shared<const Sparsity>(pattern)},
                                   std::forward<F>(f), args...);
  }
}
template <class F, class... A>
Sparsity detect_sparsity(F&& f, const A&... args) {
  if constexpr (detail::takes_reals<F>()) {
    return detail::with_real_args(
        std::forward<F>(f), [](auto g, const auto&... a) { return detect_sparsity(std::move(g), a...); }, args...);
  } else {
    const detail::Traced t = detail::trace_lifting(true, std::forward<F>(f), args...);
    std::vector<Tensor> in = detail::tensor_args(args...);
    const std::size_t n = in.size();
    for (const Tensor& c : t.captured) in.push_back(detach(c));
    return detail::detect_sparsity(t.tape, n, in);
  }
}

// The cached form: d's derived tape of f per signature (reel::jit_grad's cache).
template <class F, class D>
class CachedDerivative : public detail::CachedFunction<F> {
 public:
  CachedDerivative(F f, D d, JitOptions options, const char* what)
      : detail::CachedFunction<F>(std::move(f), options, what), d_(std::move(d)) {}

  // Through the cache (JitCore::call); inside another trace, uncached and recorded on
  // it. A miss traces f and derives its tape, run first as it is added.
  template <class... A>
  typename D::Result operator()(const A&... args) const {
    typename D::Result r;
    call(r, false, args...);
    return r;
  }

  // The same result, written into `r`: a result this function gave before (or an empty
  // one). On a compiled cache hit the new values go into r's tensors in place wherever
  // r holds the only reference to one and its shape is this call's (see
  // CompiledFunction::run), so a loop of calls allocates nothing for its results
  // (unless the compiled code calls C++ code of its own, an eager primitive's: then r
  // is filled as operator() fills it). A copy of one of r's tensors kept elsewhere
  // keeps its values (that slot gets a new tensor), but a pointer into r's memory sees
  // the new ones. If the call throws, r is left empty.
  template <class... A>
  void into(typename D::Result& r, const A&... args) const {
    call(r, true, args...);
  }

 private:
  template <class... A>
  void call(typename D::Result& r, bool reuse, const A&... args) const {
    if constexpr (detail::gives_numbers_for_reals<F, A...>()) {
      detail::numbers_as_kept_tensors<F>([&](const auto&... a) { call(r, reuse, a...); }, args...);
    } else {
      constexpr bool can_reuse =
          requires(typename D::Result& x, Recycle& kept) { d_.take(x, kept); };
      reuse = reuse && can_reuse;
      const auto tensors = detail::tensor_pointers(args...);
      // An argument that is one of r's own tensors (jf.into(r, r.value)) is read by the
      // call: r is then filled as operator() fills it, after the call.
      if constexpr (can_reuse)
        if (reuse)
          for (const Tensor* t : std::span<const Tensor* const>(tensors))
            if (d_.holds(r, t)) reuse = false;
      CacheKey key;
      std::optional<detail::Derived> dv;  // a miss's derivative
      std::vector<Tensor> outs;
      // Where r's tensors are, for a compiled hit to write into: a vector kept per thread
      // (unless a call on this thread is using it: f may call this function while
      // traced; or the thread's objects are gone, at its end), filled by the hit's run.
      detail::IntoScratch* scratch = reuse ? detail::thread_object<detail::IntoScratch>() : nullptr;
      Recycle local;
      const bool use_kept = scratch != nullptr && !scratch->busy;
      Recycle& taken = use_kept ? scratch->kept : local;
      struct Release {
        Recycle* kept;
        bool* busy;
        ~Release() {
          kept->clear();
          kept->target = nullptr;
          if (busy != nullptr) *busy = false;
        }
      } release{&taken, use_kept ? &scratch->busy : nullptr};
      if (use_kept) scratch->busy = true;
      struct Target final : RecycleTarget {
        const D* d;
        typename D::Result* r;
        void fill(Recycle& kept) override {
          if constexpr (can_reuse) d->take(*r, kept);
        }
        void put(Recycle& kept, const void* structure) override {
          if constexpr (can_reuse) d->put(*r, kept, structure);
        }
      } target;
      target.d = &d_;
      target.r = &r;
      taken.target = &target;
      CachedCall call{.hit =
                          [&](JitCore::Hit& hit) {
                            if (hit.in_place) return;  // (written into r and put back)
                            r = d_.unpack(std::move(hit.outputs), hit.structure);
                          },
                      .uncached = [&] { r = detail::derive_and_play(d_, this->f_, args...); },
                      .describe = [&] { return detail::describe_args(args...); },
                      .trace =
                          [&] {
                            Tape t = [&] {
                              detail::TraceScope scope(false, /*value_guards=*/true);
                              scope.output_tree(detail::trace_for_cache(this->f_, scope, args...));
                              return scope.finish();
                            }();
                            const std::vector<Tensor> in = detail::tensor_list(tensors);
                            dv = d_.derive(t, in.size(), in);
                            outs.resize(dv->tape.outputs.size());
                            return NewPath{std::move(dv->tape), dv->info, outs};
                          },
                      .traced = [&] { r = d_.unpack(std::move(outs), dv->info.get()); }};
      const auto key_of = [&] {
        detail::make_key(key, args...);
        return key.view();
      };
      try {
        this->core_->call(key_of, tensors, {}, call, reuse ? &taken : nullptr);
      } catch (...) {
        // r's tensors, and its second names (value of values[0]), may hold half-written
        // memory: none of it stays behind.
        if (reuse) r = typename D::Result{};
        throw;
      }
    }
  }

 private:
  D d_;
};

template <class F>
auto jit_jacobian(F&& f, JitOptions options = {}, JacobianMode mode = JacobianMode::automatic) {
  return CachedDerivative<detail::callable_t<F>, detail::JacobianDerivation>(
      detail::real_callable(std::forward<F>(f)), detail::JacobianDerivation{mode}, options, "jit_jacobian");
}
template <class F>
auto jit_jacfwd(F&& f, JitOptions options = {}) {
  return jit_jacobian(std::forward<F>(f), options, JacobianMode::forward);
}
template <class F>
auto jit_jacrev(F&& f, JitOptions options = {}) {
  return jit_jacobian(std::forward<F>(f), options, JacobianMode::reverse);
}
template <class F>
auto jit_hessian(F&& f, JitOptions options = {}) {
  return CachedDerivative<detail::callable_t<F>, detail::HessianDerivation>(detail::real_callable(std::forward<F>(f)), detail::HessianDerivation{},
                                                                      options, "jit_hessian");
}
// With a pattern: that pattern for every signature; without: detected (detect_sparsity)
// at the first arguments of each signature.
template <class F>
auto jit_sparse_jacobian(F&& f, std::optional<Sparsity> pattern = std::nullopt, JitOptions options = {}) {
  detail::SparseDerivation d;
  if (pattern) d.pattern = std::make_shared<const Sparsity>(std::move(*pattern));
  return CachedDerivative<detail::callable_t<F>, detail::SparseDerivation>(detail::real_callable(std::forward<F>(f)), std::move(d), options,
                                                                     "jit_sparse_jacobian");
}

}  // namespace reel
