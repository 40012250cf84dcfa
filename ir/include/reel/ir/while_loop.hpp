#pragma once
// The while_loop primitive's loop (ir/src/prims_while.cpp), for the tracer, which
// records the trip count of a loop it traces.
#include <cstdint>
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel {

// Runs `body` on args (num_consts consts, then the carries), giving the next carries,
// while `cond` on them gives a nonzero value; returns the final carries, and the number
// of iterations in *trips if given. With a max_trips >= 0, a loop that would run longer
// stops with throw_max_trips's reel::Error. A reel::GuardFailure in cond or body is raised
// again naming the iteration. The tapes' types are not checked here (the while_loop
// call's type rule does).
std::vector<Tensor> run_while_loop(const Tape& cond, const Tape& body, std::size_t num_consts,
                                   std::vector<Tensor> args, int64_t* trips = nullptr, int64_t max_trips = -1);

// The error of a while_loop whose cond still holds after max_trips iterations (the
// attribute max_trips, reel::WhileOptions::max_trips): interpreted, compiled or run as
// C++ alike.
[[noreturn]] void throw_max_trips(int64_t max_trips);

}  // namespace reel
