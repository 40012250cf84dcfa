#pragma once
// Cached functions for dynamic programs:
//   auto jf = reel::jit(f);          jf(args...) returns what f returns
//   auto g = reel::simplegrad(f);    auto [val, d1, ..., dn] = g(args...)
// Arguments are tensors and plain values (integers, doubles, bools, enums, strings).
// The cache key is the tensors' dtypes and shapes plus the plain values; tensors
// captured by f are constants of what was traced (pass a tensor as an argument if it
// changes). A miss traces f (a branch on a value records a guard), derives and
// simplifies (for simplegrad) and keeps the tape; the first call of a signature is
// interpreted, and its compile_after-th call compiles it. A hit runs the compiled (or
// interpreted) tape; if a guard fails, the next path cached for the signature is
// tried, and if none holds, the new path is traced and added: one signature can hold
// several paths. REEL_LOG=recompiles prints why each miss happened.
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <iterator>
#include <typeinfo>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "reel/compile.hpp"
#include "reel/passes.hpp"
#include "reel/play.hpp"
#include "reel/trace.hpp"

namespace reel {

struct JitOptions {
  // Compile a path on its compile_after-th call and interpret it before (1: compile
  // on the first call). A signature seen once is cheaper to interpret than to compile.
  int compile_after = 2;
  // Signatures kept per function; the least recently used one is evicted (its
  // compiled code freed).
  std::size_t max_entries = 256;
  // Paths (branches taken, values read) kept per signature; beyond, the least recently
  // successful one is dropped.
  std::size_t max_paths = 8;
  CompileOptions compile = {};
};

struct CacheInfo {
  uint64_t hits = 0, misses = 0;
  uint64_t entries = 0;       // paths cached now (over all signatures)
  uint64_t compilations = 0;
  double compile_seconds = 0;  // total time spent compiling
  uint64_t evictions = 0;      // signatures evicted
};

namespace detail {

// Appends one argument's part of the key, then the separator '\x1f' (a string's own
// '\x1f' and '\\' are escaped, so parts never run together).
template <class T>
void append_key(std::string& key, const T& a) {
  using D = std::decay_t<T>;
  auto out = std::back_inserter(key);
  if constexpr (std::is_same_v<D, Tensor>) {
    if (!a.defined()) throw Error("jit: an argument is an undefined tensor");
    key += "tensor ";
    key += dtype_name(a.dtype());
    key += '[';
    for (std::size_t d = 0; d < a.shape().size(); ++d) {
      if (d) key += ',';
      fmt::format_to(out, "{}", a.shape()[d]);
    }
    key += ']';
  } else if constexpr (std::is_same_v<D, bool>) {
    key += a ? "bool true" : "bool false";
  } else if constexpr (std::is_enum_v<D>) {  // the type too: two enums with equal values differ
    fmt::format_to(out, "enum {} {}", typeid(D).name(), static_cast<long long>(a));
  } else if constexpr (std::is_integral_v<D>) {  // the type too: 1 as int and as long differ
    fmt::format_to(out, "integer {}{} {}", std::is_signed_v<D> ? 'i' : 'u', 8 * sizeof(D), a);
  } else if constexpr (std::is_floating_point_v<D>) {
    fmt::format_to(out, "number f{} {}", 8 * sizeof(D), a);  // shortest text that reads back as the same value
  } else if constexpr (std::is_convertible_v<const D&, std::string_view>) {
    key += "string \"";
    for (char c : std::string_view(a)) {
      if (c == '\x1f' || c == '\\') key += '\\';
      key += c;
    }
    key += '"';
  } else {
    static_assert(std::is_same_v<D, Tensor>,
                  "reel::jit: arguments are Tensors, integers, doubles, bools, enums or strings; pass other values "
                  "through a lambda's capture (they become constants of the trace)");
  }
  key += '\x1f';
}

inline bool any_traced(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    if (in_active_trace(t)) return true;
  return false;
}

template <class... A>
std::string make_key(const A&... args) {
  std::string key;
  key.reserve(32 * sizeof...(A));
  (append_key(key, args), ...);
  return key;
}

template <class T>
void push_tensor(std::vector<Tensor>& out, const T& a) {
  if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) out.push_back(a);
}

// A result's tensors as a list, with the lengths of its vectors in order.
template <class R>
void flatten(const R& r, std::vector<Tensor>& out, std::vector<std::size_t>& lengths) {
  if constexpr (std::is_same_v<R, Tensor>) {
    out.push_back(r);
  } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
    lengths.push_back(r.size());
    out.insert(out.end(), r.begin(), r.end());
  } else if constexpr (is_tensor_tuple<R>::value) {
    std::apply([&](const auto&... t) { (flatten(t, out, lengths), ...); }, r);
  } else {
    static_assert(std::is_same_v<R, Tensor>, "reel::jit: f must return a Tensor, std::vector<Tensor>, or a tuple of them");
  }
}

template <class R>
R rebuild(const std::vector<Tensor>& in, std::size_t& pos, const std::vector<std::size_t>& lengths, std::size_t& vec) {
  if constexpr (std::is_same_v<R, Tensor>) {
    return in.at(pos++);
  } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
    const std::size_t n = lengths.at(vec++);
    std::vector<Tensor> v(in.begin() + static_cast<std::ptrdiff_t>(pos), in.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
    return v;
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return R{rebuild<std::tuple_element_t<I, R>>(in, pos, lengths, vec)...};  // braces: in order
    }(std::make_index_sequence<std::tuple_size_v<R>>{});
  }
}

// The cache, without templates (api/src/jit.cpp).
class JitCore {
 public:
  JitCore(JitOptions options, const char* what);
  ~JitCore();
  struct Hit {
    std::vector<Tensor> outputs;
    std::vector<std::size_t> lengths;
  };
  // Runs a path cached for this signature; nullopt for a miss. A final look (made
  // holding miss_lock, just before tracing) counts the miss and, under
  // REEL_LOG=recompiles, prints its reason.
  // The final look skips the first `skip` paths (tried by the first look of the same
  // call); `tried` receives how many paths a look tried.
  // `failed` collects the failed guards' messages across both looks (for the log).
  std::optional<Hit> run(const std::string& key, const std::vector<Tensor>& tensors, bool final = false,
                         std::size_t skip = 0, std::size_t* tried = nullptr, std::string* failed = nullptr);
  // Adds a newly traced path (its tape already run once: the trace) for the signature.
  void add(const std::string& key, Tape tape, std::vector<std::size_t> lengths);
  // Held while a miss traces, so that a signature missed on several threads at once is
  // traced and compiled once (the others find it when they get the lock).
  std::unique_lock<std::recursive_mutex> miss_lock();
  CacheInfo info() const;

 private:
  struct State;
  void compile_path(struct Path& p);
  std::unique_ptr<State> s_;
};

}  // namespace detail

// reel::jit(f): see the top of this file.
template <class F>
class JitFunction {
 public:
  JitFunction(F f, JitOptions options) : f_(std::move(f)), core_(std::make_shared<detail::JitCore>(options, "jit")) {}

  template <class... A>
  auto operator()(const A&... args) const {
    using R = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
    std::vector<Tensor> tensors;
    (detail::push_tensor(tensors, args), ...);
    // Called inside another trace (a jit function calling one, reel::grad of one): no
    // cache; f runs as it is, so the outer trace records its operations and guards.
    if (detail::any_traced(tensors)) return f_(args...);
    const std::string key = detail::make_key(args...);
    std::size_t tried = 0;
    std::string failed;
    if (auto hit = core_->run(key, tensors, false, 0, &tried, &failed)) return rebuilt<R>(*hit);
    const auto lock = core_->miss_lock();
    if (auto hit = core_->run(key, tensors, true, tried, nullptr, &failed)) return rebuilt<R>(*hit);  // another thread traced it
    R result = [&] {
      detail::TraceScope scope(false, /*value_guards=*/true);
      std::tuple<decltype(scope.wrap(args))...> wrapped{scope.wrap(args)...};
      R r = std::apply(f_, wrapped);
      detail::JitCore::Hit flat;
      detail::flatten(r, flat.outputs, flat.lengths);
      for (const Tensor& t : flat.outputs) scope.output(t);
      core_->add(key, scope.finish(), flat.lengths);
      for (Tensor& t : flat.outputs) t.clear_trace_tags();
      return rebuilt<R>(flat);
    }();
    return result;
  }

  CacheInfo cache_info() const { return core_->info(); }

 private:
  template <class R>
  static R rebuilt(const detail::JitCore::Hit& h) {
    std::size_t pos = 0, vec = 0;
    return detail::rebuild<R>(h.outputs, pos, h.lengths, vec);
  }
  F f_;
  std::shared_ptr<detail::JitCore> core_;
};

template <class F>
JitFunction<std::decay_t<F>> jit(F&& f, JitOptions options = {}) {
  return JitFunction<std::decay_t<F>>(std::forward<F>(f), options);
}

// reel::simplegrad(f): the cached value and gradient of a scalar f. g(args...) returns
// std::array<Tensor, n + 1>: the value, then one gradient per argument (an undefined
// tensor for an argument that is not a tensor).
template <class F>
class CachedGrad {
 public:
  CachedGrad(F f, JitOptions options) : f_(std::move(f)), core_(std::make_shared<detail::JitCore>(options, "simplegrad")) {}

  template <class... A>
  std::array<Tensor, sizeof...(A) + 1> operator()(const A&... args) const {
    std::vector<Tensor> tensors;
    (detail::push_tensor(tensors, args), ...);
    std::optional<detail::JitCore::Hit> hit;
    std::string key;
    std::size_t tried = 0;
    std::string failed;
    if (detail::any_traced(tensors)) {  // inside another trace: no cache, recorded on it
      hit = detail::JitCore::Hit{play(grad_tape(trace(f_, args...)), tensors), {}};
    } else {
      key = detail::make_key(args...);
      hit = core_->run(key, tensors, false, 0, &tried, &failed);
    }
    if (!hit) {
      const auto lock = core_->miss_lock();
      hit = core_->run(key, tensors, true, tried, nullptr, &failed);
      if (!hit) {
        Tape g = grad_tape([&] {
          detail::TraceScope scope(false, /*value_guards=*/true);
          std::tuple<decltype(scope.wrap(args))...> wrapped{scope.wrap(args)...};
          detail::collect_outputs(scope, std::apply(f_, wrapped));
          return scope.finish();
        }());
        std::vector<Tensor> outs = play(g, tensors);  // the first call is interpreted
        core_->add(key, std::move(g), {});
        hit = detail::JitCore::Hit{std::move(outs), {}};
      }
    }
    // Spread the tensor arguments' gradients over all argument positions.
    std::array<Tensor, sizeof...(A) + 1> result;
    result[0] = hit->outputs.at(0);
    std::size_t next = 1, at = 1;
    ((result[at++] = std::is_same_v<std::decay_t<A>, Tensor> ? hit->outputs.at(next++) : Tensor()), ...);
    return result;
  }

  CacheInfo cache_info() const { return core_->info(); }

 private:
  F f_;
  std::shared_ptr<detail::JitCore> core_;
};

template <class F>
CachedGrad<std::decay_t<F>> simplegrad(F&& f, JitOptions options = {}) {
  return CachedGrad<std::decay_t<F>>(std::forward<F>(f), options);
}

}  // namespace reel
