#pragma once
// Internal: the traces active on this thread, innermost last.
#include <cstdint>
#include <vector>

#include "reel/ir/builder.hpp"

namespace reel::detail {

class Trace {
 public:
  explicit Trace(uint64_t id) : id(id) {}
  const uint64_t id;
  TapeBuilder builder;

  bool owns(const Tensor& t) const { return tag(t) != kNoVar; }
  // The variable for `t` in this trace: its own, or a new constant holding its value.
  Var var_of(const Tensor& t) {
    const Var v = tag(t);
    return v != kNoVar ? v : builder.constant(t);
  }

 private:
  Var tag(const Tensor& t) const {
    for (const TraceTag& tag : t.trace_tags())
      if (tag.trace_id == id) return tag.var;
    return kNoVar;
  }
};

std::vector<Trace*>& active_traces();

}  // namespace reel::detail
