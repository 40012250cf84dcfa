#pragma once
// A strided placement (concat, unslice; kernels/place.cpp): each argument copied into
// its place in `out` by a generated loop (Primitive::strided_place), after zeros where
// none goes. Needs no LLVM.
#include "reel/ir/tape.hpp"

namespace reel::codegen {

struct PlaceStep {
  Var out;
};
// Whether a placement's arguments cover its result (concat); otherwise (unslice) the
// rest is zeroed first.
bool place_covers(const Tape& t, Var out);

}  // namespace reel::codegen
