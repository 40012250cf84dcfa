#pragma once
// Internal: the traces active on this thread, innermost last.
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "reel/error.hpp"
#include "reel/ir/builder.hpp"

namespace reel::detail {

class Trace;
std::vector<Trace*>& active_traces();  // innermost last

class Trace {
 public:
  Trace(uint64_t id, bool lift_captures, bool value_guards)
      : id(id), lift_captures(lift_captures), value_guards(value_guards) {}
  const uint64_t id;
  const bool lift_captures;
  const bool value_guards;  // values read with item()/values() become guards (cached functions)
  bool lift_tracked = false;  // a loop body's: params and tensors computed from them become inputs too
  // A loop body's: the loop (scan, fori_loop, while_loop), named by its guards on values
  // read (a body is traced once and runs every iteration: a value it reads is checked
  // each time, never a constant).
  const char* loop = nullptr;
  int64_t reads = 0;  // values of this trace's tensors read: item(), values(), branches (bool)
  TapeBuilder builder;
  std::vector<Tensor> captured;  // lifted inputs' values
  // Memory of tensors whose untraced copies must not be used (reel::Params: a copy
  // captured by value would silently get no gradient).
  std::vector<const void*> watched;
  std::string watched_why;
  // reel::Real's constants 0 and 1, recorded once, when the trace first unpacks a traced
  // vector into Reals (tracer/src/real.cpp); undefined until then.
  Tensor real_zero, real_one;

  bool owns(const Tensor& t) const { return tag(t) != kNoVar; }
  // The variable for `t` in this trace: its own; with lift_captures, an input for a
  // tensor of an enclosing active trace (one per such tensor); else a new constant.
  Var var_of(const Tensor& t) {
    if (const Var v = tag(t); v != kNoVar) return v;
    if (lift_captures)
      for (const Trace* enclosing : active_traces())
        if (const Var outer = enclosing->tag(t); enclosing != this && outer != kNoVar) {
          auto [it, is_new] = lifted_.try_emplace({enclosing->id, outer}, kNoVar);
          if (is_new) {
            it->second = builder.input({t.dtype(), t.shape()});
            captured.push_back(t);
          }
          return it->second;
        }
    // A tensor of another thread's live trace would be that trace's value frozen here
    // (a returned output, a capture), the failure the checks on operations prevent.
    if (in_foreign_trace(t))
      throw Error(fmt::format("trace: a tensor the traced function returns or captures belongs to {}", kForeignTrace));
    if (lift_tracked && t.is_tracked()) {  // the loop's call is then tracked for reel::back
      auto [it, is_new] = tracked_inputs_.try_emplace({t.raw(), t.shape()}, kNoVar);
      if (is_new) {
        it->second = builder.input({t.dtype(), t.shape()});
        captured.push_back(t);
      }
      return it->second;
    }
    if (t.is_tracked()) {  // a param's memory may be assigned later: the constant is its value now
      auto [it, is_new] = snapshots_.try_emplace({t.raw(), t.shape()}, kNoVar);
      if (is_new) {  // one copy per tensor per trace
        Tensor copy(t.dtype(), t.shape());
        std::unique_lock<std::mutex> lock;  // W.assign on another thread may be writing it
        if (t.is_param()) lock = std::unique_lock<std::mutex>(param_node(t).mutex);
        if (copy.nbytes() > 0) std::memcpy(copy.mutable_raw(), t.raw(), copy.nbytes());
        it->second = builder.constant(copy);
      }
      return it->second;
    }
    return builder.constant(t);
  }

 private:
  std::map<std::pair<uint64_t, Var>, Var> lifted_;  // enclosing (trace, var) -> input
  std::map<std::pair<const void*, Shape>, Var> snapshots_;  // tracked tensors' constants
  std::map<std::pair<const void*, Shape>, Var> tracked_inputs_;  // with lift_tracked

  // The variable `t` is in this trace, or kNoVar.
  Var tag(const Tensor& t) const {
    for (const TraceTag& tag : t.trace_tags())
      if (tag.trace_id == id) return tag.var;
    return kNoVar;
  }
};

}  // namespace reel::detail
