#pragma once
// A strided placement (concat, unslice; kernels/place.cpp): each argument copied into
// its place in `out` by a generated loop (Primitive::strided_place), after zeros where
// none goes. An argument computed by a fused loop of a covering placement is written
// into its place by that loop instead (LoopStep::placed). Needs no LLVM.
#include <optional>
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel::codegen {

struct PlaceStep {
  Var out;
  // Per argument: written into its place by the loop computing it, so not copied here.
  std::vector<bool> by_loop;
};
// Whether a placement's arguments cover its result (concat); otherwise (unslice) the
// rest is zeroed first.
bool place_covers(const Tape& t, Var out);
// Each argument's place in the result: its first element and its strides.
std::vector<StridedMap> place_maps(const Tape& t, Var out);
// An argument's place (`map`, over the argument's `shape`) as element strides over a
// loop of iteration space `loop` that computes it; none if the shapes differ other than
// by dimensions of size 1, or if the place is one a fused loop should not write
// (strided along its innermost dimension, over more than a few elements: a vector
// loop would lose its contiguous stores).
std::optional<std::vector<int64_t>> place_in_loop(const StridedMap& map, const Shape& shape, const Shape& loop);

}  // namespace reel::codegen
