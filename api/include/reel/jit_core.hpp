#pragma once
// The cache engine behind every cached front door: reel::jit, reel::jit_grad and the
// jit_* derivatives (reel/jit.hpp, reel/jacobian.hpp), and Python's reel.jit and
// reel.jit_grad. A front door makes a call's key (a CacheKey: reel/detail/jit_key.hpp
// for C++ arguments, python/src/tree.cpp for Python ones) and finds its tensors; it
// hands JitCore::call what only it knows (a CachedCall: how to trace f, how to build
// its result); the engine owns the rest: the paths cached per signature, the miss
// protocol, the statistics and REEL_LOG=recompiles. (Its code without templates:
// api/src/jit.cpp.)
#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "reel/compile.hpp"
#include "reel/grad.hpp"
#include "reel/ir/tape.hpp"
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

// A call's cache key: the bytes of each argument's part, on the stack up to kInline of
// them (a hit's key is never copied).
class CacheKey {
 public:
  CacheKey() = default;
  CacheKey(const CacheKey&) = delete;
  CacheKey& operator=(const CacheKey&) = delete;
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

namespace detail {

// The tensor arguments of a call, by pointer, in order.
template <class... A>
constexpr std::size_t count_tensors() {
  return (std::size_t{std::is_same_v<std::decay_t<A>, Tensor>} + ... + 0);
}
// The tensors of arguments holding structs or containers, by pointer: those of packed
// leaves (reel::Real and its containers, made a tensor by the walk) kept here, at
// stable addresses.
struct TensorPointers {
  std::vector<const Tensor*> list;
  std::deque<Tensor> packed_leaves;
  TensorPointers() = default;
  TensorPointers(const TensorPointers&) = delete;
  TensorPointers& operator=(const TensorPointers&) = delete;
  TensorPointers(TensorPointers&&) = default;  // (a deque's move keeps its elements where they are)
  void operator()(const Tensor& t, const std::string&) { list.push_back(&t); }
  void packed(Tensor t) { list.push_back(&packed_leaves.emplace_back(std::move(t))); }
  std::size_t size() const { return list.size(); }
  operator std::span<const Tensor* const>() const { return list; }
};
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
    TensorPointers out;
    detail::NoFieldPath path;
    (walk(args, path, out), ...);
    return out;
  }
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

}  // namespace detail

// A new path for the cache, as a front door traced (and derived) it.
struct NewPath {
  Tape tape;
  std::shared_ptr<const void> structure;  // the door's (e.g. the traced result's TreeDef), back with each hit
  // Set when the tape is derived from the trace (a gradient tape) and not run yet: its
  // first run, as it is added, writes its outputs here (compiled at once under
  // compile_after 1, so that a loop is not first interpreted iteration by iteration).
  std::span<Tensor> first_run = {};
};

// Runs a look or an add as it is (a door that holds a lock, such as Python's GIL,
// releases it there instead).
struct AsIs {
  template <class Fn>
  decltype(auto) operator()(Fn&& fn) const {
    return std::forward<Fn>(fn)();
  }
};

// What one front door's call gives JitCore::call: callables returning the call's
// result R, built with designated initialisers:
//   hit(JitCore::Hit&) -> R      a hit's result (its outputs are in `out` if the call gave one)
//   uncached() -> R              f run as it is, without the cache (inside another trace,
//                                which records it; or while another thread traces, for a
//                                door that does not wait)
//   describe() -> vector<string> the key's parts as text (for explaining misses)
//   trace() -> NewPath           f traced (and derived) on the call's arguments
//   traced() -> R                the result of the call that traced, once its path is added
//   unlocked(fn)                 runs a look or the add (AsIs, or releasing a lock)
//   waits                        false: while another thread traces, run uncached rather
//                                than wait for it (Python: that thread may be waiting for
//                                this one, f calling itself on a thread it joins)
template <class Hit, class Uncached, class Describe, class Trace, class Traced, class Unlocked = AsIs>
struct CachedCall {
  Hit hit;
  Uncached uncached;
  Describe describe;
  Trace trace;
  Traced traced;
  Unlocked unlocked = {};
  bool waits = true;
};
template <class Hit, class Uncached, class Describe, class Trace, class Traced>
CachedCall(Hit, Uncached, Describe, Trace, Traced) -> CachedCall<Hit, Uncached, Describe, Trace, Traced>;
template <class Hit, class Uncached, class Describe, class Trace, class Traced, class Unlocked>
CachedCall(Hit, Uncached, Describe, Trace, Traced, Unlocked, bool)
    -> CachedCall<Hit, Uncached, Describe, Trace, Traced, Unlocked>;

namespace detail {
struct Path;  // one traced path of a signature (api/src/jit.cpp)
}

struct Recycle;
// A kept result a compiled hit may write its outputs into (`into`'s): fill lists where
// its tensors are (Recycle::slots, in output order); put, after a run wrote through them,
// makes the result whole (its second names, or its structure when it was another's).
class RecycleTarget {
 public:
  virtual void fill(Recycle& r) = 0;
  virtual void put(Recycle& r, const void* structure) = 0;

 protected:
  ~RecycleTarget() = default;
};

// Where a compiled hit may write its outputs: each a tensor the caller owns, where it
// lives (a field of the result), with how many tensors the caller owns hold its memory
// (it and the caller's copies of it: CompiledFunction::run's holders). JitCore::run_path
// has `target` fill the slots just before a compiled run and put right after it, with no
// other code between (not on a path whose compiled code calls C++ code of its own,
// CompiledFunction::calls_out, and only when every slot is empty or written in place):
// nothing can reassign the result while the slots point into it.
struct Recycle {
  RecycleTarget* target = nullptr;
  std::vector<Tensor*> slots;
  std::vector<int> holders;  // one per slot
  void clear() {
    slots.clear();
    holders.clear();
  }
};

// The cache of one cached function: the paths traced per signature (key), run compiled
// or interpreted.
class JitCore {
 public:
  // `what` names the front door in errors and in the log ("jit", "simplegrad", ...).
  JitCore(JitOptions options, const char* what);
  ~JitCore();
  // A hit's outputs, and the structure its path was added with (NewPath::structure),
  // valid while the Hit lives: it holds the path (or, for the path this thread ran last,
  // keeps that memo busy, which holds it), so that a hit takes no reference count.
  class Hit {
   public:
    std::vector<Tensor> outputs;
    const void* structure = nullptr;
    // The outputs were written through the call's Recycle::slots (`outputs` is empty).
    bool in_place = false;

    Hit() = default;
    Hit(Hit&& o) noexcept
        : outputs(std::move(o.outputs)), structure(o.structure), in_place(o.in_place), path_(std::move(o.path_)),
          busy_(std::exchange(o.busy_, nullptr)) {}
    Hit& operator=(Hit&&) = delete;
    ~Hit() {
      if (busy_ != nullptr) *busy_ = false;
    }

   private:
    friend class JitCore;
    std::shared_ptr<const void> path_;
    bool* busy_ = nullptr;
  };

  // One call through the cache, the miss protocol of every front door: a call inside
  // another trace runs uncached (that trace records f's operations and guards);
  // otherwise look up the key's paths; on a miss take the miss lock and look again
  // (another thread may have traced the signature meanwhile; this final look counts
  // the miss and explains it under REEL_LOG=recompiles); if it misses too, trace and
  // add the path. `tensors` are the call's tensor arguments in key order; with `out`
  // (the caller knows how many outputs its paths make) a hit writes them there and
  // its `outputs` stay empty: no vector on a hit. `make_key() -> string_view` builds the
  // key once the arguments are known not to be traced (a traced call runs uncached
  // whatever its key would have been; a param is refused before anything else).
  // `recycle` (without `out`): a kept result a compiled hit writes its outputs into
  // when its target fills as many slots as the hit makes outputs, each empty or held by
  // its counted holders alone (CompiledFunction::run writes those of the right type in
  // place), and the path's code calls no C++ code of its own; the hit is then
  // `in_place`, the result already put.
  template <class MakeKey, class Call>
  auto call(const MakeKey& make_key, std::span<const Tensor* const> tensors, std::span<Tensor> out, Call& c,
            Recycle* recycle = nullptr) {
    if (detail::check_unrecorded_args(tensors, detail::Unrecorded::cached)) return c.uncached();
    const std::string_view key = make_key();
    Looks looks;
    looks.recycle = recycle;
    if (std::optional<Hit> hit = c.unlocked([&] { return run(key, tensors, looks.look(out)); })) return c.hit(*hit);
    const std::unique_lock<std::recursive_mutex> lock = c.waits ? miss_lock() : try_miss_lock();
    if (!lock.owns_lock()) return c.uncached();
    std::vector<std::string> parts = c.describe();
    if (std::optional<Hit> hit = c.unlocked([&] { return run(key, tensors, looks.look(out, &parts)); }))
      return c.hit(*hit);  // another thread traced it
    NewPath p = c.trace();
    const bool first_run = !p.first_run.empty();
    c.unlocked([&] {
      add(key, std::move(parts), std::move(p.tape), std::move(p.structure), first_run ? tensors : decltype(tensors){},
          p.first_run);
    });
    return c.traced();
  }

  CacheInfo info() const;

 private:
  // Runs a path cached for this signature; nullopt for a miss. A final look (made
  // holding miss_lock, just before tracing) counts the miss and, under
  // REEL_LOG=recompiles, prints its reason (`parts`: the key's parts as text).
  // `tried` collects the paths a look tried (by identity), which a later look of the
  // same call skips; `failed` collects the failed guards' messages (for the log).
  // With `out` set, the outputs are written there and the hit's `outputs` stay empty.
  struct Look {
    std::span<Tensor> out = {};
    bool final = false;
    std::vector<std::shared_ptr<const void>>* tried = nullptr;  // held: no address reuse
    std::string* failed = nullptr;
    const std::vector<std::string>* parts = nullptr;
    Recycle* recycle = nullptr;  // (call's)
  };
  // What the looks of one call share: the paths tried, the guards failed.
  struct Looks {
    std::vector<std::shared_ptr<const void>> tried;
    std::string failed;
    Recycle* recycle = nullptr;
    Look look(std::span<Tensor> out = {}, const std::vector<std::string>* parts = nullptr) {
      return {.out = out,
              .final = parts != nullptr,
              .tried = &tried,
              .failed = &failed,
              .parts = parts,
              .recycle = recycle};
    }
  };
  std::optional<Hit> run(std::string_view key, std::span<const Tensor* const> tensors, const Look& look);
  // Adds a newly traced path (its tape already run once: the trace) for the signature.
  // `structure` comes back with each hit of the path. With `out` given, the path's
  // first call runs here on `tensors` (NewPath::first_run).
  void add(std::string_view key, std::vector<std::string> parts, Tape tape, std::shared_ptr<const void> structure,
           std::span<const Tensor* const> tensors = {}, std::span<Tensor> out = {});
  // Held while a miss traces, so that a signature missed on several threads at once is
  // traced and compiled once (the others find it when they get the lock).
  std::unique_lock<std::recursive_mutex> miss_lock();
  // The same lock if it is free (or held by this thread), else an unlocked one: for a
  // caller that must not wait for the thread tracing (CachedCall::waits).
  std::unique_lock<std::recursive_mutex> try_miss_lock();
  struct State;
  struct Attempt;
  std::shared_ptr<detail::Path> next_path(std::string_view key, Attempt& a);
  std::shared_ptr<detail::Path> first_path(std::string_view key, uint64_t& generation);
  std::vector<std::shared_ptr<detail::Path>> paths_now(std::string_view key);
  Hit run_path(detail::Path& p, std::span<const Tensor* const> tensors, const Look& look);
  void promote(std::string_view key, const std::shared_ptr<detail::Path>& p);
  void count_miss(const Look& look, std::size_t cached_tried, const std::string& failed);
  std::string why_missed(const Look& look, std::size_t cached_tried, const std::string& failed) const;
  void insert_path(std::string_view key, std::vector<std::string> parts, std::shared_ptr<detail::Path> path,
                   std::vector<std::shared_ptr<detail::Path>>& evicted);
  void evict_signatures(std::vector<std::shared_ptr<detail::Path>>& evicted);
  void compile_path(detail::Path& p);
  std::unique_ptr<State> s_;
};

}  // namespace reel
