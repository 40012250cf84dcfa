#include "reel/trace.hpp"

#include <atomic>

#include "trace_state.hpp"

namespace reel::detail {

std::vector<Trace*>& active_traces() {
  thread_local std::vector<Trace*> traces;
  return traces;
}

namespace {
// A traced one-element tensor converted to bool: a guard on every trace it belongs to.
void record_guard(const Tensor& t, bool value) {
  static const Primitive& guard = primitive("guard");
  for (Trace* trace : active_traces())
    if (trace->owns(t)) (void)trace->builder.call(guard, {trace->var_of(t)}, {{"expected", value}});
}

// A traced tensor's values read with item()/values(): a guard on them, on the traces
// made for a cache.
void record_value_read(const Tensor& t) {
  static const Primitive& guard = primitive("guard_value");
  for (Trace* trace : active_traces()) {
    if (!trace->value_guards || !trace->owns(t)) continue;
    Tensor plain = t;
    plain.clear_trace_tags();  // reading its values must not record again
    (void)trace->builder.call(guard, {trace->var_of(t)}, {{"values", plain.values()}});
  }
}

uint64_t next_trace_id() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1);
}
}  // namespace

TraceScope::TraceScope(bool lift_captures, bool value_guards)
    : trace_(new Trace(next_trace_id(), lift_captures, value_guards)) {
  set_trace_query(&reel::is_traced);  // lets compiled functions refuse traced tensors
  set_guard_recorder(&record_guard);   // lets Tensor::operator bool record branches
  set_value_read_recorder(&record_value_read);
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
  delete trace_;
}

Tensor TraceScope::input(const Tensor& value) {
  if (!value.defined()) throw Error("trace: an argument is an undefined tensor");
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

}  // namespace reel::detail

namespace reel {

bool is_traced(const Tensor& t) {
  for (const detail::Trace* trace : detail::active_traces())
    if (trace->owns(t)) return true;
  return false;
}

}  // namespace reel
