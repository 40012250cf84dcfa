#include "reel/trace.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "trace_state.hpp"

namespace reel::detail {

std::vector<Trace*>& active_traces() {
  thread_local std::vector<Trace*> traces;
  return traces;
}

namespace {

// The traces alive (begun and not ended) on every thread, by id: a tensor tagged by
// one of another thread's is refused rather than used untraced (in_foreign_trace).
struct LiveTrace {
  std::thread::id thread;
  bool value_guards;
};
struct LiveTraces {
  std::mutex mutex;
  std::unordered_map<uint64_t, LiveTrace> traces;
  std::atomic<int64_t> count{0};  // traces.size(), read without the lock
};
LiveTraces& live_traces() {
  static LiveTraces* live = new LiveTraces();  // never destroyed: threads may end traces at exit
  return *live;
}
thread_local int64_t t_live_here = 0;  // this thread's alive traces, paused ones included

bool foreign_trace(const Tensor& t, bool* value_guards) {
  LiveTraces& live = live_traces();
  // Every alive trace is this thread's (the common case): no lock. A trace alive on
  // another thread that tagged t began before t reached this thread, so it is counted.
  if (live.count.load() == t_live_here) return false;
  const std::thread::id here = std::this_thread::get_id();
  const std::lock_guard<std::mutex> lock(live.mutex);
  // Every tag: one of several foreign traces may guard the values read (a cached
  // function's inside a plain trace). A finished trace's tags are not in the map.
  bool foreign = false;
  for (const TraceTag& tag : t.trace_tags())
    if (const auto it = live.traces.find(tag.trace_id); it != live.traces.end() && it->second.thread != here) {
      foreign = true;
      if (value_guards != nullptr) *value_guards = *value_guards || it->second.value_guards;
    }
  return foreign;
}

// A traced one-element tensor converted to bool: a guard on every trace it belongs to.
void record_guard(const Tensor& t, bool value) {
  if (in_foreign_trace(t)) throw Error(fmt::format("bool: the tensor belongs to {}", kForeignTrace));
  const Primitive& guard = prims::guard();
  const char* loop = nullptr;  // as for values read (below): a branch in a loop body names the loop
  for (Trace* trace : active_traces()) {
    if (trace->loop != nullptr) loop = trace->loop;
    if (!trace->owns(t)) continue;
    ++trace->reads;
    Attrs attrs{{"expected", value}};
    if (loop != nullptr) attrs.set("loop", std::string(loop));
    (void)trace->builder.call(guard, {trace->var_of(t)}, std::move(attrs));
  }
}

thread_local int t_guard_value_reads = 0;  // live GuardValueReads on this thread

// A traced tensor's values read with item()/values(): a guard on them, on the traces
// made for a cache (and on every trace under GuardValueReads).
void record_value_read(const Tensor& t, const char* op) {
  // Another thread's trace for a cache would not guard the value (a plain trace does
  // not guard them on its own thread either: the value is a constant there too).
  if (bool guards = false; in_foreign_trace(t, &guards) && guards)
    throw Error(fmt::format("{}: the tensor belongs to {}", op, kForeignTrace));
  const Primitive& guard = prims::guard_value();
  // A trace nested in a loop body's (reel::checkpoint, grad inside the body) becomes
  // part of that body: its reads are checked every iteration too. (Outermost first.)
  const char* loop = nullptr;
  for (Trace* trace : active_traces()) {
    if (trace->loop != nullptr) loop = trace->loop;
    if (!trace->owns(t)) continue;
    ++trace->reads;
    if (!trace->value_guards && loop == nullptr && t_guard_value_reads == 0) continue;
    Tensor plain = t;
    plain.clear_trace_tags();  // reading its values must not record again
    Attrs attrs{{"values", plain.values()}};
    if (loop != nullptr) attrs.set("loop", std::string(loop));
    (void)trace->builder.call(guard, {trace->var_of(t)}, std::move(attrs));
  }
}

// What the runtime asks about traces (detail::TraceHooks).
constexpr TraceHooks kTraceHooks{
    .in_active_trace = &reel::is_traced,  // lets compiled functions refuse traced tensors
    .in_foreign_trace = &foreign_trace,
    .record_guard = &record_guard,  // lets Tensor::operator bool record branches
    .record_value_read = &record_value_read,
};

uint64_t next_trace_id() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1);
}
}  // namespace

GuardValueReads::GuardValueReads() { ++t_guard_value_reads; }
GuardValueReads::~GuardValueReads() { --t_guard_value_reads; }

TraceScope::TraceScope(bool lift_captures, bool value_guards)
    : trace_(new Trace(next_trace_id(), lift_captures, value_guards)) {
  static const bool hooks_installed = (set_trace_hooks(&kTraceHooks), true);
  (void)hooks_installed;
  {
    LiveTraces& live = live_traces();
    const std::lock_guard<std::mutex> lock(live.mutex);
    live.traces.emplace(trace_->id, LiveTrace{std::this_thread::get_id(), value_guards});
    live.count.fetch_add(1);
    ++t_live_here;
  }
  active_traces().push_back(trace_);
}

TraceScope::~TraceScope() {
  auto& traces = active_traces();
  // Traces end in the reverse order they start (scopes are stack objects).
  for (auto it = traces.begin(); it != traces.end(); ++it)
    if (*it == trace_) {
      traces.erase(it);
      break;
    }
  {
    LiveTraces& live = live_traces();
    const std::lock_guard<std::mutex> lock(live.mutex);
    live.traces.erase(trace_->id);
    live.count.fetch_sub(1);
    --t_live_here;
  }
  delete trace_;
}

Tensor TraceScope::input(const Tensor& value) {
  if (!value.defined()) throw Error("trace: an argument is an undefined tensor");
  // (Its tags are cleared below: the other thread's trace would see none of this one.)
  if (in_foreign_trace(value)) throw Error(fmt::format("trace: an argument belongs to {}", kForeignTrace));
  Tensor t = value;  // shares storage; only the tags differ
  t.clear_trace_tags();
  t.add_trace_tag({trace_->id, trace_->builder.input({value.dtype(), value.shape()})});
  return t;
}

void TraceScope::forbid_untraced_copies(const Tensor& value, std::string why) {
  if (value.defined() && value.nbytes() > 0) trace_->watched.push_back(value.raw());
  trace_->watched_why = std::move(why);
}

void TraceScope::output(const Tensor& value) {
  if (!value.defined()) throw Error("trace: the function returned an undefined tensor");
  std::vector<Var> outs = trace_->builder.tape().outputs;
  outs.push_back(trace_->var_of(value));
  trace_->builder.set_outputs(std::move(outs));
}

Tape TraceScope::finish() { return trace_->builder.finish(); }

const std::vector<Tensor>& TraceScope::captured() const { return trace_->captured; }

void TraceScope::lift_tracked() { trace_->lift_tracked = true; }

void TraceScope::loop_body(const char* op) { trace_->loop = op; }

int64_t TraceScope::values_read() const { return trace_->reads; }

}  // namespace reel::detail

namespace reel {

bool is_traced(const Tensor& t) {
  for (const detail::Trace* trace : detail::active_traces())
    if (trace->owns(t)) return true;
  return false;
}

}  // namespace reel
