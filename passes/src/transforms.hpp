#pragma once
// Internal: the transformations the passes hand to derivative rules (reel::Transforms).
#include "reel/passes.hpp"

namespace reel {

// The vjp and jvp of a body with several outputs (see reel::Transforms).
Tape vjp_body(const Tape& body, std::span<const bool> seeded, std::span<const bool> wanted);
Tape jvp_body(const Tape& body, std::span<const bool> active);
Tape batch_body(const Tape& body, std::span<const bool> batched, int64_t size);

namespace detail {
const Transforms& pass_transforms();
}  // namespace detail

}  // namespace reel
