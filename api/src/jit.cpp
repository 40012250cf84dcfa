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
#include "reel/thread_object.hpp"

namespace reel {

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

namespace detail {

// One traced path of a signature: its tape (forward, or gradient for simplegrad), run
// by the interpreter until its compile_after-th call compiles it.
struct Path {
  Tape tape;
  std::shared_ptr<const void> structure;  // the caller's (JitCore::add)
  std::once_flag compiled_once;
  std::optional<CompiledFunction> compiled;  // set once, under compiled_once
  bool calls_out = false;                    // compiled->calls_out(), set with it
  std::atomic<bool> ready{false};             // compiled is set (other threads read it after this)
  std::atomic<uint64_t> calls{1};             // successful interpreted runs; the trace was the first
};

// One thread's hits through its memo of one cache: written by that thread alone, so
// counted with a plain load and store (no atomic read-modify-write on a hit), read by
// JitCore::info on any thread.
struct HitCount {
  std::atomic<uint64_t> n{0};
  void add_one() { n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
};

struct Entry {
  std::vector<std::string> key;  // its parts as text, for explaining misses
  std::vector<std::shared_ptr<Path>> paths;
  std::list<std::string>::iterator recency;
};

}  // namespace detail

using detail::Entry;
using detail::Path;

struct JitCore::State {
  JitOptions options;
  const char* what;
  mutable std::mutex mutex;  // the map, the recency list, the counters
  std::recursive_mutex miss_mutex;  // recursive: f may call its own cached function
  std::unordered_map<std::string, Entry, KeyHash, std::equal_to<>> entries;
  std::list<std::string> recency;  // most recently used first
  CacheInfo info;                  // hits are counted in `hits` and `memo_hits`, without the lock
  std::atomic<uint64_t> hits{0};
  // The hits of threads' memos (HitMemo::hits), one counter per thread that remembers
  // this cache; a counter no memo holds any more is folded into `hits`.
  std::vector<std::shared_ptr<detail::HitCount>> memo_hits;
  // Counts every change to what a lookup finds (a path added or dropped, a path or a
  // signature moved to the front): a thread's HitMemo holds while it is unchanged.
  std::atomic<uint64_t> generation{0};
  uint64_t id = 0;  // this cache's, never reused (a memo names its cache by it, not its address)
};

namespace {

std::atomic<uint64_t> next_core_id{1};

// A thread's last hit: the cache, the key, the path that held and the generation it was
// found at. While that cache's generation is unchanged its key still finds that path
// first (its signature the most recently used), so a call with the same key runs it
// without the lock and the lookup: what a cached function called in a loop with one
// signature does on every call, with no atomic read-modify-write (its hits are counted
// in a counter of its own). The memo holds its path: a destroyed cache empties the
// paths in its lists (JitCore::~JitCore); an evicted path is freed when the memos
// holding it let go: at once on the thread that evicts; on another thread when it
// remembers another hit (found first by a lookup of any cache), when a guard of it
// fails, or at its end. `busy` while the memo's path runs and its hit is used: a call
// made from inside (an external step calling a cached function) neither reads nor
// replaces it.
struct HitMemo {
  uint64_t core = 0;
  uint64_t generation = 0;
  std::string key;
  std::shared_ptr<Path> path;
  std::shared_ptr<detail::HitCount> hits;  // this thread's, for `core`
  bool busy = false;
  void clear() {
    core = 0;
    path.reset();
    hits.reset();
  }
};

// (Under the state's lock.) Counters no memo holds are folded into the total.
void fold_memo_hits(std::vector<std::shared_ptr<detail::HitCount>>& counts, std::atomic<uint64_t>& total) {
  std::erase_if(counts, [&](const std::shared_ptr<detail::HitCount>& c) {
    if (c.use_count() != 1) return false;
    std::atomic_thread_fence(std::memory_order_acquire);  // (after the memo's last count)
    total.fetch_add(c->n.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return true;
  });
}

}  // namespace

JitCore::JitCore(JitOptions options, const char* what) : s_(std::make_unique<State>()) {
  if (options.compile_after < 1)
    throw Error(fmt::format("{}: expected compile_after >= 1, got {}", what, options.compile_after));
  if (options.max_entries < 1) throw Error(fmt::format("{}: expected max_entries >= 1, got 0", what));
  if (options.max_paths < 1) throw Error(fmt::format("{}: expected max_paths >= 1, got 0", what));
  s_->options = options;
  s_->what = what;
  s_->id = next_core_id.fetch_add(1, std::memory_order_relaxed);
}

namespace {
// Lets go of this thread's memo of a cache's path, unless a hit of it is in use.
void forget_memo(uint64_t core) {
  HitMemo* const memo = detail::thread_object<HitMemo>();
  if (memo != nullptr && !memo->busy && memo->core == core) memo->clear();
}
}  // namespace

JitCore::~JitCore() {
  forget_memo(s_->id);
  // Other threads' memos may hold some of these paths (HitMemo says until when): what
  // the paths own goes now (the tape and its captures, the compiled code), which
  // is safe because no call of this cache runs while it is destroyed, and no memo
  // uses a path of a cache whose id is gone.
  for (auto& [_, e] : s_->entries)
    for (auto& p : e.paths) {
      p->compiled.reset();
      p->tape = Tape();
      p->structure.reset();
    }
}

// Compiles a path once (whichever thread gets there first), counting the time.
void JitCore::compile_path(Path& p) {
  std::call_once(p.compiled_once, [&] {
    const auto t0 = std::chrono::steady_clock::now();
    p.compiled.emplace(compile(p.tape, s_->options.compile));
    p.calls_out = p.compiled->calls_out();
    p.ready.store(true, std::memory_order_release);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(s_->mutex);
    s_->info.compilations += 1;
    s_->info.compile_seconds += seconds;
  });
}

std::unique_lock<std::recursive_mutex> JitCore::miss_lock() { return std::unique_lock<std::recursive_mutex>(s_->miss_mutex); }
std::unique_lock<std::recursive_mutex> JitCore::try_miss_lock() {
  return std::unique_lock<std::recursive_mutex>(s_->miss_mutex, std::try_to_lock);
}

// The lookup: the signature's most recently successful path (nullptr for none), its
// signature made the most recently used.
std::shared_ptr<Path> JitCore::first_path(std::string_view key, uint64_t& generation) {
  std::lock_guard<std::mutex> lock(s_->mutex);
  auto it = s_->entries.find(key);
  if (it == s_->entries.end()) return nullptr;
  if (it->second.recency != s_->recency.begin()) {
    s_->recency.splice(s_->recency.begin(), s_->recency, it->second.recency);
    s_->generation.fetch_add(1, std::memory_order_release);
  }
  generation = s_->generation.load(std::memory_order_relaxed);
  return it->second.paths.empty() ? nullptr : it->second.paths.front();
}

// The signature's paths as they are now (other threads may add or reorder them).
std::vector<std::shared_ptr<Path>> JitCore::paths_now(std::string_view key) {
  std::lock_guard<std::mutex> lock(s_->mutex);
  auto it = s_->entries.find(key);
  return it == s_->entries.end() ? std::vector<std::shared_ptr<Path>>{} : it->second.paths;
}

// Runs one path (compiled, or interpreted until its compile_after-th successful run
// compiles it); a failing guard throws GuardFailure.
JitCore::Hit JitCore::run_path(Path& p, std::span<const Tensor* const> tensors, const Look& look) {
  const bool compiled = p.ready.load(std::memory_order_acquire);
  Hit hit;
  hit.structure = p.structure.get();
  const std::size_t made = compiled ? p.compiled->num_outputs() : p.tape.outputs.size();
  if (!look.out.empty() && look.out.size() != made)
    throw Error(fmt::format("{}: a cached path makes {} outputs, the call expects {}", s_->what, made, look.out.size()));
  if (compiled) {
    // Into a kept result: its slots filled now, written and put back with no other code
    // between (Recycle says why).
    if (look.out.empty() && look.recycle != nullptr && look.recycle->target != nullptr && !p.calls_out) {
      Recycle& rc = *look.recycle;
      rc.clear();
      rc.target->fill(rc);
      bool fits = rc.slots.size() == made;
      for (std::size_t k = 0; fits && k < rc.slots.size(); ++k)
        fits = !rc.slots[k]->defined() || rc.slots[k]->unshared(rc.holders[k]);
      if (fits) {
        p.compiled->run(tensors, rc.slots, rc.holders);
        rc.target->put(rc, hit.structure);
        rc.clear();
        hit.in_place = true;
        return hit;
      }
      rc.clear();
    }
    if (look.out.empty()) hit.outputs.resize(made);
    p.compiled->run(tensors, look.out.empty() ? std::span<Tensor>(hit.outputs) : look.out);
    return hit;
  }
  hit.outputs = play(p.tape, detail::tensor_list(tensors));
  if (!look.out.empty()) std::move(hit.outputs.begin(), hit.outputs.end(), look.out.begin()), hit.outputs.clear();
  // A path's calls count its successful runs, so a path whose guards fail is never
  // compiled for nothing.
  if (p.calls.fetch_add(1) + 1 >= static_cast<uint64_t>(s_->options.compile_after)) compile_path(p);
  return hit;
}

// A path that held after another failed becomes the first: tried first next time,
// dropped last.
void JitCore::promote(std::string_view key, const std::shared_ptr<Path>& p) {
  std::lock_guard<std::mutex> lock(s_->mutex);
  auto it = s_->entries.find(key);
  if (it == s_->entries.end()) return;
  auto& ps = it->second.paths;
  auto at = std::find(ps.begin(), ps.end(), p);
  if (at != ps.end()) std::rotate(ps.begin(), at, at + 1);
  s_->generation.fetch_add(1, std::memory_order_release);
}

// One look's walk over a signature's paths. Paths are told apart by identity
// (look.tried), not position: other threads may add or reorder paths meanwhile, and a
// later look of the same call skips exactly the paths tried before.
struct JitCore::Attempt {
  std::shared_ptr<Path> first;  // the most recently successful path, looked up first
  std::vector<std::shared_ptr<Path>> others;
  bool copied = false;  // others holds the paths as they were after the first failed
  std::vector<std::shared_ptr<const void>> local_tried;
  std::string local_failed;
  std::vector<std::shared_ptr<const void>>& tried;
  std::string& failed;  // the failed guards' messages, for the log
  explicit Attempt(const Look& look)
      : tried(look.tried != nullptr ? *look.tried : local_tried),
        failed(look.failed != nullptr ? *look.failed : local_failed) {}
  bool was_tried(const std::shared_ptr<Path>& p) const {
    return std::any_of(tried.begin(), tried.end(), [&](const auto& t) { return t.get() == p.get(); });
  }
  void failed_with(std::shared_ptr<Path> p, const GuardFailure& e) {
    tried.push_back(std::move(p));  // (only failures: a hit allocates nothing here)
    failed += (failed.empty() ? "" : "; ") + std::string(e.what());
  }
};

// The next path to try: the first (unless tried), then the others as they are now,
// copied out only when the first fails (the hit path takes the lock once). Null when
// none is left.
std::shared_ptr<Path> JitCore::next_path(std::string_view key, Attempt& a) {
  if (a.first != nullptr && !a.was_tried(a.first)) return a.first;
  if (!a.copied && a.first != nullptr) a.others = paths_now(key);  // (no first: no entry, or no path)
  a.copied = true;
  std::erase_if(a.others, [&](const std::shared_ptr<Path>& p) { return a.was_tried(p); });
  if (a.others.empty()) return nullptr;
  std::shared_ptr<Path> p = std::move(a.others.front());
  a.others.erase(a.others.begin());
  return p;
}

std::optional<JitCore::Hit> JitCore::run(std::string_view key, std::span<const Tensor* const> tensors,
                                         const Look& look) {
  Attempt a(look);
  HitMemo* const memo = detail::thread_object<HitMemo>();  // (null at the thread's end)
  const bool use_memo = memo != nullptr && !memo->busy;
  if (use_memo && memo->core == s_->id && memo->generation == s_->generation.load(std::memory_order_acquire) &&
      memo->key == key && memo->path != nullptr) {
    memo->busy = true;
    try {
      Hit hit = run_path(*memo->path, tensors, look);
      hit.busy_ = &memo->busy;  // (cleared when the hit is gone: until then the memo holds its path)
      memo->hits->add_one();
      return hit;
    } catch (const GuardFailure& e) {  // the full lookup goes on, without this path
      memo->busy = false;
      a.failed_with(std::move(memo->path), e);
      memo->clear();
    } catch (...) {
      memo->busy = false;
      throw;
    }
  }
  uint64_t generation = 0;
  a.first = first_path(key, generation);
  while (std::shared_ptr<Path> p = next_path(key, a)) {
    try {
      if (use_memo) memo->busy = true;  // (a call from inside this one leaves the memo alone)
      Hit hit = run_path(*p, tensors, look);
      if (use_memo) memo->busy = false;
      s_->hits.fetch_add(1, std::memory_order_relaxed);
      if (p != a.first) {
        promote(key, p);
      } else if (use_memo) {
        if (memo->core != s_->id || memo->hits == nullptr) {
          memo->hits = std::make_shared<detail::HitCount>();
          std::lock_guard<std::mutex> lock(s_->mutex);
          fold_memo_hits(s_->memo_hits, s_->hits);
          s_->memo_hits.push_back(memo->hits);
        }
        memo->core = s_->id;
        memo->generation = generation;
        memo->key.assign(key);
        // (The path it held goes after the memo is whole again: its destructor may run
        // code that makes a cached call.)
        const std::shared_ptr<Path> before = std::exchange(memo->path, p);
      }
      hit.path_ = std::move(p);  // (the structure's owner, while the hit is used)
      return hit;
    } catch (const GuardFailure& e) {
      if (use_memo) memo->busy = false;
      a.failed_with(std::move(p), e);
    } catch (...) {
      if (use_memo) memo->busy = false;
      throw;
    }
  }
  if (look.final) count_miss(look, a.tried.size(), a.failed);
  return std::nullopt;
}

// A final look missed: counted, and under REEL_LOG=recompiles explained on stderr.
void JitCore::count_miss(const Look& look, std::size_t cached_tried, const std::string& failed) {
  {
    std::lock_guard<std::mutex> lock(s_->mutex);
    s_->info.misses += 1;
  }
  if (!log_recompiles()) return;
  std::string why = why_missed(look, cached_tried, failed);
  if (why.empty())
    why = "a new signature whose difference its text does not show (the bits of a number, e.g. a NaN's payload, or "
          "a plain field of a struct)";
  std::fprintf(stderr, "reel: %s miss: %s\n", s_->what, why.c_str());
}

// Why a call missed: its guards failed, or what is new against the cached signature
// closest to it (fewest differing arguments); empty if the parts' text shows nothing.
std::string JitCore::why_missed(const Look& look, std::size_t cached_tried, const std::string& failed) const {
  if (cached_tried > 0)
    return fmt::format("a guard failed on each of the {} path{} cached for this signature: {}", cached_tried,
                       cached_tried == 1 ? "" : "s", failed);
  std::lock_guard<std::mutex> lock(s_->mutex);
  if (s_->entries.empty()) return "first call";
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
  if (best == nullptr) return fmt::format("{} arguments, no cached signature has as many", mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    if ((*best)[i] == mine[i]) continue;
    const bool tensor = mine[i].rfind("tensor ", 0) == 0;
    return fmt::format("argument {}: new {} {} (cached: {})", i + 1, tensor ? "shape or dtype" : "value", mine[i],
                       (*best)[i]);
  }
  return "";
}

void JitCore::add(std::string_view key, std::vector<std::string> parts, Tape tape, std::shared_ptr<const void> structure,
                  std::span<const Tensor* const> tensors, std::span<Tensor> out) {
  // Evicted paths are released after the lock (freeing compiled code takes the JIT's).
  std::vector<std::shared_ptr<Path>> evicted;
  auto path = std::make_shared<Path>();
  path->tape = std::move(tape);
  path->structure = std::move(structure);
  if (s_->options.compile_after == 1) compile_path(*path);  // compiled at once: counted as the first call's
  if (!out.empty() && path->ready.load(std::memory_order_acquire)) path->compiled->run(tensors, out);
  else if (!out.empty()) detail::move_outputs(play(path->tape, detail::tensor_list(tensors)), out);
  {
    std::lock_guard<std::mutex> lock(s_->mutex);
    insert_path(key, std::move(parts), std::move(path), evicted);
    evict_signatures(evicted);
  }
  if (!evicted.empty()) forget_memo(s_->id);  // (it may hold an evicted path)
}

// (Under the lock.) The newest path first in its signature's list, the signature made
// the most recently used; beyond max_paths the least recently successful path is dropped.
void JitCore::insert_path(std::string_view key, std::vector<std::string> parts, std::shared_ptr<Path> path,
                          std::vector<std::shared_ptr<Path>>& evicted) {
  auto it = s_->entries.find(key);
  if (it == s_->entries.end()) {
    s_->recency.emplace_front(key);
    it = s_->entries.emplace(std::string(key), Entry{std::move(parts), {}, s_->recency.begin()}).first;
  } else {
    s_->recency.splice(s_->recency.begin(), s_->recency, it->second.recency);
  }
  auto& ps = it->second.paths;
  ps.insert(ps.begin(), std::move(path));
  s_->generation.fetch_add(1, std::memory_order_release);
  s_->info.entries += 1;
  if (ps.size() > s_->options.max_paths) {
    evicted.push_back(std::move(ps.back()));
    ps.pop_back();
    s_->info.entries -= 1;
    s_->info.evictions += 1;
  }
}

// (Under the lock.) The least recently used signatures evicted down to max_entries.
void JitCore::evict_signatures(std::vector<std::shared_ptr<Path>>& evicted) {
  while (s_->entries.size() > s_->options.max_entries) {
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
  fold_memo_hits(s_->memo_hits, s_->hits);
  i.hits = s_->hits.load(std::memory_order_relaxed);
  for (const auto& c : s_->memo_hits) i.hits += c->n.load(std::memory_order_relaxed);
  return i;
}

}  // namespace reel
