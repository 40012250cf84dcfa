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
#include <cstring>
#include <iterator>
#include <limits>
#include <typeinfo>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "reel/compile.hpp"
#include "reel/grad.hpp"
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

// The cache key of a call, built on the stack: each argument's part is a tag, then
// fixed-size fields (a tensor's dtype, rank and dims; a plain value's bytes; a
// string's length then its bytes), so parts never run together.
class KeyBuffer {
 public:
  KeyBuffer() = default;
  KeyBuffer(const KeyBuffer&) = delete;
  KeyBuffer& operator=(const KeyBuffer&) = delete;
  void append(const void* p, std::size_t n) {
    if (!on_heap_ && size_ + n > kInline) heap_.assign(inline_, size_), on_heap_ = true;
    if (on_heap_) heap_.append(static_cast<const char*>(p), n);
    else std::memcpy(inline_ + size_, p, n);
    size_ += n;
  }
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (!on_heap_ && size_ + sizeof(T) <= kInline) {  // a fixed-size copy: a move instruction
      std::memcpy(inline_ + size_, &v, sizeof(T));
      size_ += sizeof(T);
    } else {
      append(&v, sizeof(T));
    }
  }
  std::string_view view() const { return on_heap_ ? std::string_view(heap_) : std::string_view(inline_, size_); }

 private:
  static constexpr std::size_t kInline = 240;
  char inline_[kInline];
  std::size_t size_ = 0;
  bool on_heap_ = false;
  std::string heap_;
};

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
void append_plain(KeyBuffer& key, const P& a) {
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
void append_key(KeyBuffer& key, const T& a);

// Appends a struct's parts (see append_key).
struct KeyVisitor {
  KeyBuffer& key;
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
void append_key(KeyBuffer& key, const T& a) {
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

// The tensor arguments of a call, by pointer, in order.
template <class... A>
constexpr std::size_t count_tensors() {
  return (std::size_t{std::is_same_v<std::decay_t<A>, Tensor>} + ... + 0);
}
// (On the stack for tensor and plain arguments; a vector when structs hold them.)
template <class... A>
auto tensor_pointers(const A&... args) {
  if constexpr (only_tensors_and_plain<A...>()) {
    std::array<const Tensor*, count_tensors<A...>()> out{};
    std::size_t at = 0;
    auto one = [&](const auto& a) {
      if constexpr (std::is_same_v<std::decay_t<decltype(a)>, Tensor>) out[at++] = &a;
    };
    (one(args), ...);
    return out;
  } else {
    std::vector<const Tensor*> out;
    (for_each_tensor(args, [&](const Tensor& t) { out.push_back(&t); }), ...);
    return out;
  }
}

// Whether a tensor argument is traced on this thread; refuses params, tensors computed
// from them and other threads' traced tensors (detail::check_unrecorded_args).
inline bool any_traced(std::span<const Tensor* const> tensors) {
  return check_unrecorded_args(tensors, Unrecorded::cached);
}

inline std::vector<Tensor> tensor_list(std::span<const Tensor* const> tensors) {
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const Tensor* t : tensors) out.push_back(*t);
  return out;
}

// A gradient tape's outputs (the value, one gradient per tensor argument) into place.
inline void move_outputs(std::vector<Tensor> from, std::span<Tensor> to) {
  if (from.size() != to.size())
    throw Error(fmt::format("simplegrad: the gradient tape made {} outputs, expected {}", from.size(), to.size()));
  std::move(from.begin(), from.end(), to.begin());
}

template <class... A>
void make_key(KeyBuffer& key, const A&... args) {
  (append_key(key, args), ...);
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
R rebuild(std::vector<Tensor>& in, std::size_t& pos, const std::vector<std::size_t>& lengths, std::size_t& vec) {
  if constexpr (std::is_same_v<R, Tensor>) {
    return std::move(in.at(pos++));
  } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
    const std::size_t n = lengths.at(vec++);
    if (pos + n > in.size()) throw Error("jit: a cached path made fewer outputs than its result needs");
    std::vector<Tensor> v(std::make_move_iterator(in.begin() + static_cast<std::ptrdiff_t>(pos)),
                          std::make_move_iterator(in.begin() + static_cast<std::ptrdiff_t>(pos + n)));
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
  // REEL_LOG=recompiles, prints its reason (`parts`: the key's parts as text).
  // `tried` collects the paths a look tried (by identity), which a later look of the
  // same call skips; `failed` collects the failed guards' messages (for the log).
  // With `out` set (the caller knows how many outputs its paths make), the outputs
  // are written there and the hit's `outputs` stay empty: no vector on a hit.
  struct Look {
    std::span<Tensor> out = {};
    bool final = false;
    std::vector<std::shared_ptr<const void>>* tried = nullptr;  // held: no address reuse
    std::string* failed = nullptr;
    const std::vector<std::string>* parts = nullptr;
  };
  std::optional<Hit> run(std::string_view key, std::span<const Tensor* const> tensors, const Look& look);
  // Adds a newly traced path (its tape already run once: the trace) for the signature.
  void add(std::string_view key, std::vector<std::string> parts, Tape tape, std::vector<std::size_t> lengths);
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
    const auto tensors = detail::tensor_pointers(args...);
    // Called inside another trace (a jit function calling one, reel::grad of one): no
    // cache; f runs as it is, so the outer trace records its operations and guards.
    if (detail::any_traced(tensors)) return f_(args...);
    detail::KeyBuffer key;
    detail::make_key(key, args...);
    std::vector<std::shared_ptr<const void>> tried;
    std::string failed;
    if constexpr (std::is_same_v<R, Tensor>) {  // one output: no vector on a hit
      Tensor out;
      if (core_->run(key.view(), tensors, {.out = std::span<Tensor>(&out, 1), .tried = &tried, .failed = &failed}))
        return out;
    } else if (auto hit = core_->run(key.view(), tensors, {.tried = &tried, .failed = &failed})) {
      return rebuilt<R>(*hit);
    }
    const auto lock = core_->miss_lock();
    std::vector<std::string> parts = detail::describe_args(args...);
    if (auto hit = core_->run(key.view(), tensors, {.final = true, .tried = &tried, .failed = &failed, .parts = &parts}))
      return rebuilt<R>(*hit);  // another thread traced it
    R result = [&] {
      detail::TraceScope scope(false, /*value_guards=*/true);
      std::tuple<decltype(scope.wrap(args))...> wrapped{scope.wrap(args)...};
      R r = std::apply(f_, wrapped);
      detail::JitCore::Hit flat;
      detail::flatten(r, flat.outputs, flat.lengths);
      for (const Tensor& t : flat.outputs) scope.output(t);
      core_->add(key.view(), std::move(parts), scope.finish(), flat.lengths);
      for (Tensor& t : flat.outputs) t.clear_trace_tags();
      return rebuilt<R>(flat);
    }();
    return result;
  }

  CacheInfo cache_info() const { return core_->info(); }

 private:
  template <class R>
  static R rebuilt(detail::JitCore::Hit& h) {
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

  // With tensor and plain arguments: std::array<Tensor, n + 1>. With a struct or
  // container argument: what reel::withgradient returns ({value, tuple of each
  // argument's gradient of its own type}).
  template <class... A>
  auto operator()(const A&... args) const {
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

  CacheInfo cache_info() const { return core_->info(); }

 private:
  // The value and the gradients of the tensors (in walk order) into `outs`.
  template <class... A>
  void fill(std::span<Tensor> outs, std::span<const Tensor* const> tensors, const A&... args) const {
    bool hit = false;
    detail::KeyBuffer key;
    std::vector<std::shared_ptr<const void>> tried;
    std::string failed;
    if (detail::any_traced(tensors)) {  // inside another trace: no cache, recorded on it
      detail::move_outputs(play(grad_tape(trace(f_, args...)), detail::tensor_list(tensors)), outs);
      return;
    }
    detail::make_key(key, args...);
    hit = core_->run(key.view(), tensors, {.out = outs, .tried = &tried, .failed = &failed}).has_value();
    if (hit) return;
    const auto lock = core_->miss_lock();
    std::vector<std::string> parts = detail::describe_args(args...);
    hit = core_->run(key.view(), tensors, {.out = outs, .final = true, .tried = &tried, .failed = &failed, .parts = &parts})
              .has_value();
    if (hit) return;
    Tape g = grad_tape([&] {
      detail::TraceScope scope(false, /*value_guards=*/true);
      std::tuple<decltype(scope.wrap(args))...> wrapped{scope.wrap(args)...};
      detail::collect_outputs(scope, std::apply(f_, wrapped));
      return scope.finish();
    }());
    std::vector<Tensor> v = play(g, detail::tensor_list(tensors));  // the first call is interpreted
    core_->add(key.view(), std::move(parts), std::move(g), {});
    detail::move_outputs(std::move(v), outs);
  }

  F f_;
  std::shared_ptr<detail::JitCore> core_;
};

template <class F>
CachedGrad<std::decay_t<F>> simplegrad(F&& f, JitOptions options = {}) {
  return CachedGrad<std::decay_t<F>>(std::forward<F>(f), options);
}

}  // namespace reel
