#include "reel/jit.hpp"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <list>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "reel/play.hpp"

namespace reel::detail {

namespace {

// Read on every miss (misses are slow anyway), so a program may turn it on late.
bool log_recompiles() {
  const char* v = std::getenv("REEL_LOG");
  return v != nullptr && std::string_view(v).find("recompiles") != std::string_view::npos;
}

// Lookup by string_view: a hit's key is built on the stack and never copied.
struct KeyHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

// One traced path of a signature: its tape (forward, or gradient for simplegrad), run
// by the interpreter until its compile_after-th call compiles it.
struct Path {
  Tape tape;
  std::vector<std::size_t> lengths;
  std::once_flag compiled_once;
  std::optional<CompiledFunction> compiled;  // set once, under compiled_once
  std::atomic<bool> ready{false};             // compiled is set (other threads read it after this)
  std::atomic<uint64_t> calls{1};             // successful interpreted runs; the trace was the first
};

struct Entry {
  std::vector<std::string> key;  // its parts as text, for explaining misses
  std::vector<std::shared_ptr<Path>> paths;
  std::list<std::string>::iterator recency;
};

struct JitCore::State {
  JitOptions options;
  const char* what;
  mutable std::mutex mutex;  // the map, the recency list, the counters
  std::recursive_mutex miss_mutex;  // recursive: f may call its own cached function
  std::unordered_map<std::string, Entry, KeyHash, std::equal_to<>> entries;
  std::list<std::string> recency;  // most recently used first
  CacheInfo info;                  // hits are counted in `hits`, without the lock
  std::atomic<uint64_t> hits{0};
};

JitCore::JitCore(JitOptions options, const char* what) : s_(std::make_unique<State>()) {
  if (options.compile_after < 1)
    throw Error(fmt::format("{}: expected compile_after >= 1, got {}", what, options.compile_after));
  if (options.max_entries < 1) throw Error(fmt::format("{}: expected max_entries >= 1, got 0", what));
  if (options.max_paths < 1) throw Error(fmt::format("{}: expected max_paths >= 1, got 0", what));
  s_->options = options;
  s_->what = what;
}

JitCore::~JitCore() = default;

// Compiles a path once (whichever thread gets there first), counting the time.
void JitCore::compile_path(Path& p) {
  std::call_once(p.compiled_once, [&] {
    const auto t0 = std::chrono::steady_clock::now();
    p.compiled.emplace(compile(p.tape, s_->options.compile));
    p.ready.store(true, std::memory_order_release);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(s_->mutex);
    s_->info.compilations += 1;
    s_->info.compile_seconds += seconds;
  });
}

std::unique_lock<std::recursive_mutex> JitCore::miss_lock() { return std::unique_lock<std::recursive_mutex>(s_->miss_mutex); }

std::optional<JitCore::Hit> JitCore::run(std::string_view key, std::span<const Tensor* const> tensors,
                                         const Look& look) {
  // The hit path: one lookup under the lock, and the first path (the most recently
  // successful) tried; the others are copied out only when its guards fail. Paths are
  // told apart by identity (look.tried), not position: other threads may add or
  // reorder paths meanwhile, and a later look skips exactly the paths tried before.
  std::shared_ptr<Path> first;
  {
    std::lock_guard<std::mutex> lock(s_->mutex);
    auto it = s_->entries.find(key);
    if (it != s_->entries.end()) {
      if (!it->second.paths.empty()) first = it->second.paths.front();
      if (it->second.recency != s_->recency.begin()) s_->recency.splice(s_->recency.begin(), s_->recency, it->second.recency);
    }
  }
  std::string local_failed;
  std::string& failed = look.failed != nullptr ? *look.failed : local_failed;  // the failed guards, for the log
  std::vector<std::shared_ptr<const void>> local_tried;
  std::vector<std::shared_ptr<const void>>& tried = look.tried != nullptr ? *look.tried : local_tried;
  auto was_tried = [&](const Path* p) {
    return std::any_of(tried.begin(), tried.end(), [&](const auto& t) { return t.get() == p; });
  };
  std::vector<std::shared_ptr<Path>> others;
  bool copied = first == nullptr;  // no entry, or no path: nothing more to copy
  for (std::size_t i = 0;; ++i) {
    std::shared_ptr<Path> p;
    if (i == 0 && first != nullptr && !was_tried(first.get())) {
      p = first;
    } else {
      if (!copied) {  // the first failed or was tried: the others, as they are now
        copied = true;
        std::lock_guard<std::mutex> lock(s_->mutex);
        auto it = s_->entries.find(key);
        if (it != s_->entries.end()) others = it->second.paths;
      }
      while (!others.empty() && was_tried(others.front().get())) others.erase(others.begin());
      if (others.empty()) break;
      p = std::move(others.front());
      others.erase(others.begin());
    }
    try {
      const bool compiled = p->ready.load(std::memory_order_acquire);
      Hit hit{{}, p->lengths};
      const std::size_t made = compiled ? p->compiled->num_outputs() : p->tape.outputs.size();
      if (!look.out.empty() && look.out.size() != made)
        throw Error(fmt::format("{}: a cached path makes {} outputs, the call expects {}", s_->what, made,
                                look.out.size()));
      if (compiled) {
        if (look.out.empty()) hit.outputs.resize(made);
        p->compiled->run(tensors, look.out.empty() ? std::span<Tensor>(hit.outputs) : look.out);
      } else {
        hit.outputs = play(p->tape, tensor_list(tensors));
        if (!look.out.empty()) std::move(hit.outputs.begin(), hit.outputs.end(), look.out.begin()), hit.outputs.clear();
        // A path's calls count its successful runs; after its compile_after-th it is
        // compiled, so a path whose guards fail is never compiled for nothing.
        if (p->calls.fetch_add(1) + 1 >= static_cast<uint64_t>(s_->options.compile_after)) compile_path(*p);
      }
      s_->hits.fetch_add(1, std::memory_order_relaxed);
      if (p != first) {  // most recently successful first: tried first next time, dropped last
        std::lock_guard<std::mutex> lock(s_->mutex);
        auto it = s_->entries.find(key);
        if (it != s_->entries.end()) {
          auto& ps = it->second.paths;
          auto at = std::find(ps.begin(), ps.end(), p);
          if (at != ps.end()) std::rotate(ps.begin(), at, at + 1);
        }
      }
      return hit;
    } catch (const GuardFailure& e) {
      tried.push_back(p);  // (only failures: a hit allocates nothing here)
      if (!failed.empty()) failed += "; ";
      failed += e.what();
    }
  }
  const bool final = look.final;
  const std::size_t cached = tried.size();
  if (!final) return std::nullopt;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(s_->mutex);
    s_->info.misses += 1;
    if (!log_recompiles()) return std::nullopt;
    if (cached > 0) {
      why = fmt::format("a guard failed on each of the {} path{} cached for this signature: {}", cached,
                        cached == 1 ? "" : "s", failed);
    } else if (s_->entries.empty()) {
      why = "first call";
    } else {
      // The cached signature closest to this one (fewest differing arguments) says what is new.
      static const std::vector<std::string> none;
      const std::vector<std::string>& mine = look.parts != nullptr ? *look.parts : none;
      const std::vector<std::string>* best = nullptr;
      std::size_t best_diff = SIZE_MAX;
      for (const auto& [_, e] : s_->entries) {
        if (e.key.size() != mine.size()) continue;
        std::size_t diff = 0;
        for (std::size_t i = 0; i < mine.size(); ++i) diff += e.key[i] != mine[i];
        if (diff < best_diff) best_diff = diff, best = &e.key;
      }
      if (best == nullptr) {
        why = fmt::format("{} arguments, no cached signature has as many", mine.size());
      } else {
        for (std::size_t i = 0; i < mine.size(); ++i) {
          if ((*best)[i] == mine[i]) continue;
          const bool tensor = mine[i].rfind("tensor ", 0) == 0;
          why = fmt::format("argument {}: new {} {} (cached: {})", i + 1, tensor ? "shape or dtype" : "value", mine[i],
                            (*best)[i]);
          break;
        }
      }
    }
  }
  if (why.empty())
    why = "a new signature whose difference its text does not show (the bits of a number, e.g. a NaN's payload, or "
          "a plain field of a struct)";
  std::fprintf(stderr, "reel: %s miss: %s\n", s_->what, why.c_str());
  return std::nullopt;
}

void JitCore::add(std::string_view key, std::vector<std::string> parts, Tape tape, std::vector<std::size_t> lengths) {
  // Evicted paths are released after the lock (freeing compiled code takes the JIT's).
  std::vector<std::shared_ptr<Path>> evicted;
  auto path = std::make_shared<Path>();
  path->tape = std::move(tape);
  path->lengths = std::move(lengths);
  if (s_->options.compile_after == 1) compile_path(*path);  // compiled at once: counted as the first call's
  std::lock_guard<std::mutex> lock(s_->mutex);
  auto it = s_->entries.find(key);
  if (it == s_->entries.end()) {
    s_->recency.emplace_front(key);
    it = s_->entries.emplace(std::string(key), Entry{std::move(parts), {}, s_->recency.begin()}).first;
  } else {
    s_->recency.splice(s_->recency.begin(), s_->recency, it->second.recency);
  }
  auto& ps = it->second.paths;
  ps.insert(ps.begin(), std::move(path));  // the newest first
  s_->info.entries += 1;
  if (ps.size() > s_->options.max_paths) {  // drop the least recently successful path
    evicted.push_back(std::move(ps.back()));
    ps.pop_back();
    s_->info.entries -= 1;
    s_->info.evictions += 1;
  }
  while (s_->entries.size() > s_->options.max_entries) {  // evict the least recently used signature
    const std::string victim = s_->recency.back();
    s_->recency.pop_back();
    auto v = s_->entries.find(victim);
    s_->info.entries -= v->second.paths.size();
    s_->info.evictions += 1;
    for (auto& p : v->second.paths) evicted.push_back(std::move(p));
    s_->entries.erase(v);
  }
}

CacheInfo JitCore::info() const {
  std::lock_guard<std::mutex> lock(s_->mutex);
  CacheInfo i = s_->info;
  i.hits = s_->hits.load(std::memory_order_relaxed);
  return i;
}

}  // namespace reel::detail
