#pragma once
// What a failed `guard` (a branch a trace took) says, interpreted or compiled: one text
// for both. `loop` names the loop whose body the branch is in (the call's optional
// `loop` attribute: scan, fori_loop, while_loop), empty outside loops.
#include <string>
#include <string_view>

namespace reel {

std::string branch_guard_failure(bool expected, double value, std::string_view loop);

}  // namespace reel
