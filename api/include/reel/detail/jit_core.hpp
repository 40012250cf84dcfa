#pragma once
// The cache behind reel::jit and reel::simplegrad(f), without templates (its code is
// api/src/jit.cpp), and the argument handling they share: the tensors of a call by
// pointer, and the refusal of params. Part of reel/jit.hpp (include that): it needs
// JitOptions and CacheInfo.
#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "reel/grad.hpp"
#include "reel/ir/tape.hpp"
#include "reel/trace.hpp"

namespace reel::detail {

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


struct Path;  // one traced path of a signature (api/src/jit.cpp)

// The cache, without templates (api/src/jit.cpp).
class JitCore {
 public:
  JitCore(JitOptions options, const char* what);
  ~JitCore();
  struct Hit {
    std::vector<Tensor> outputs;
    std::shared_ptr<const void> structure;  // what add() was given for the path
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
  // `structure` (the caller's, e.g. the TreeDef of the traced result) comes back with
  // each hit of the path. With `out` given, the path's first call runs here on
  // `tensors` (a tape derived from the trace, such as a gradient tape, not run yet):
  // compiled when the path compiles as it is added (compile_after 1), so that a loop
  // is not first interpreted iteration by iteration.
  void add(std::string_view key, std::vector<std::string> parts, Tape tape, std::shared_ptr<const void> structure,
           std::span<const Tensor* const> tensors = {}, std::span<Tensor> out = {});
  // Held while a miss traces, so that a signature missed on several threads at once is
  // traced and compiled once (the others find it when they get the lock).
  std::unique_lock<std::recursive_mutex> miss_lock();
  // The same lock if it is free (or held by this thread), else an unlocked one: for a
  // caller that must not wait for the thread tracing (Python: a thread that the tracing
  // thread itself waits for).
  std::unique_lock<std::recursive_mutex> try_miss_lock();
  CacheInfo info() const;

 private:
  struct State;
  struct Attempt;
  std::shared_ptr<Path> next_path(std::string_view key, Attempt& a);
  std::shared_ptr<Path> first_path(std::string_view key);
  std::vector<std::shared_ptr<Path>> paths_now(std::string_view key);
  Hit run_path(Path& p, std::span<const Tensor* const> tensors, const Look& look);
  void promote(std::string_view key, const std::shared_ptr<Path>& p);
  void count_miss(const Look& look, std::size_t cached_tried, const std::string& failed);
  std::string why_missed(const Look& look, std::size_t cached_tried, const std::string& failed) const;
  void insert_path(std::string_view key, std::vector<std::string> parts, std::shared_ptr<Path> path,
                   std::vector<std::shared_ptr<Path>>& evicted);
  void evict_signatures(std::vector<std::shared_ptr<Path>>& evicted);
  void compile_path(Path& p);
  std::unique_ptr<State> s_;
};

}  // namespace reel::detail
