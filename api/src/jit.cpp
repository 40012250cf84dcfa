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

// A key's parts (one per argument), for explaining misses.
std::vector<std::string> parts(const std::string& key) {
  std::vector<std::string> out(1);
  for (std::size_t i = 0; i < key.size(); ++i) {
    if (key[i] == '\\' && i + 1 < key.size()) {
      out.back() += key[++i];
    } else if (key[i] == '\x1f') {
      out.emplace_back();
    } else {
      out.back() += key[i];
    }
  }
  out.pop_back();  // after the last separator
  return out;
}

}  // namespace

// One traced path of a signature: its tape (forward, or gradient for simplegrad), run
// by the interpreter until its compile_after-th call compiles it.
struct Path {
  Tape tape;
  std::vector<std::size_t> lengths;
  std::once_flag compiled_once;
  std::optional<CompiledFunction> compiled;  // set once, under compiled_once
  std::atomic<bool> ready{false};             // compiled is set (other threads read it after this)
  std::atomic<uint64_t> calls{1};             // the trace was the first
};

struct Entry {
  std::vector<std::string> key;
  std::vector<std::shared_ptr<Path>> paths;
  std::list<std::string>::iterator recency;
};

struct JitCore::State {
  JitOptions options;
  const char* what;
  mutable std::mutex mutex;  // the map, the recency list, the counters
  std::recursive_mutex miss_mutex;  // recursive: f may call its own cached function
  std::unordered_map<std::string, Entry> entries;
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

std::optional<JitCore::Hit> JitCore::run(const std::string& key, const std::vector<Tensor>& tensors,
                                         bool final, std::size_t skip, std::size_t* tried,
                                         std::string* failed_so_far) {
  const std::string& k = key;
  std::vector<std::shared_ptr<Path>> paths;
  {
    std::lock_guard<std::mutex> lock(s_->mutex);
    auto it = s_->entries.find(k);
    if (it != s_->entries.end()) {
      paths = it->second.paths;
      s_->recency.splice(s_->recency.begin(), s_->recency, it->second.recency);
    }
  }
  std::string local;
  std::string& failed = failed_so_far != nullptr ? *failed_so_far : local;  // the failed guards, for the log
  if (tried != nullptr) *tried = paths.size();
  for (std::size_t i = skip; i < paths.size(); ++i) {
    const std::shared_ptr<Path>& p = paths[i];
    try {
      const bool compiled = p->ready.load(std::memory_order_acquire);
      std::vector<Tensor> outs = compiled ? (*p->compiled)(tensors) : play(p->tape, tensors);
      // A path's calls count its successful runs; after its compile_after-th it is
      // compiled, so a path whose guards fail is never compiled for nothing.
      const uint64_t n = p->calls.fetch_add(1) + 1;
      if (!compiled && n >= static_cast<uint64_t>(s_->options.compile_after)) compile_path(*p);
      s_->hits.fetch_add(1, std::memory_order_relaxed);
      if (i > 0) {  // most recently successful first: tried first next time, dropped last
        std::lock_guard<std::mutex> lock(s_->mutex);
        auto it = s_->entries.find(k);
        if (it != s_->entries.end()) {
          auto& ps = it->second.paths;
          auto at = std::find(ps.begin(), ps.end(), p);
          if (at != ps.end()) std::rotate(ps.begin(), at, at + 1);
        }
      }
      return Hit{std::move(outs), p->lengths};
    } catch (const GuardFailure& e) {
      if (!failed.empty()) failed += "; ";
      failed += e.what();
    }
  }
  if (!final) return std::nullopt;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(s_->mutex);
    s_->info.misses += 1;
    if (!log_recompiles()) return std::nullopt;
    if (!paths.empty()) {
      why = fmt::format("a guard failed on each of the {} path{} cached for this signature: {}", paths.size(),
                        paths.size() == 1 ? "" : "s", failed);
    } else if (s_->entries.empty()) {
      why = "first call";
    } else {
      // The cached signature closest to this one (fewest differing arguments) says what is new.
      const std::vector<std::string> mine = parts(key);
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
  std::fprintf(stderr, "reel: %s miss: %s\n", s_->what, why.c_str());
  return std::nullopt;
}

void JitCore::add(const std::string& key, Tape tape, std::vector<std::size_t> lengths) {
  auto path = std::make_shared<Path>();
  path->tape = std::move(tape);
  path->lengths = std::move(lengths);
  if (s_->options.compile_after == 1) compile_path(*path);  // compiled at once: counted as the first call's
  const std::string& k = key;
  std::lock_guard<std::mutex> lock(s_->mutex);
  auto it = s_->entries.find(k);
  if (it == s_->entries.end()) {
    s_->recency.push_front(k);
    it = s_->entries.emplace(k, Entry{parts(key), {}, s_->recency.begin()}).first;
  } else {
    s_->recency.splice(s_->recency.begin(), s_->recency, it->second.recency);
  }
  auto& ps = it->second.paths;
  ps.insert(ps.begin(), std::move(path));  // the newest first
  s_->info.entries += 1;
  if (ps.size() > s_->options.max_paths) {  // drop the least recently successful path
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
    s_->entries.erase(v);  // its compiled code is freed with the last reference
  }
}

CacheInfo JitCore::info() const {
  std::lock_guard<std::mutex> lock(s_->mutex);
  CacheInfo i = s_->info;
  i.hits = s_->hits.load(std::memory_order_relaxed);
  return i;
}

}  // namespace reel::detail
