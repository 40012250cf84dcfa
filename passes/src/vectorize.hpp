#pragma once
// Internal to the passes: what vectorize (vectorize.cpp) knows that reroll asks.
#include "reel/ir/primitive.hpp"

namespace reel::detail {

// Whether a carry updated by p (p(carry, term), or carry - term) is a reduction that
// vectorize turns into a reduce: add, sub, mul, maximum, minimum.
bool reduces(const Primitive& p);

}  // namespace reel::detail
