#pragma once
// Internal to reroll (reroll.cpp): a loop found in a tape, as verification describes it
// and emission folds it into a scan.
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel::reroll_detail {

enum class Cls : uint8_t { internal, carry, invariant, constant };
struct Slot {
  Cls cls;
  Var x;  // internal: position in the iteration; carry: position in the previous one; invariant: the variable
};

// A body's argument slots as iteration 1 reads them, and its slices that advance.
struct Steady {
  std::vector<int32_t> first;  // per position: its first slot (and one past the last)
  std::vector<Slot> slots;
  std::vector<int64_t> start1, delta;  // slice positions: iteration 1's start, the step (kNone if not a slice)
};
constexpr int64_t kNone = std::numeric_limits<int64_t>::min();

// A loop to fold, with everything its scan needs.
struct Loop {
  Var start = kNoVar;
  int32_t P = 0;
  int64_t R = 0;
  Steady st;
  std::vector<int32_t> slot_id;               // per slot: its const, carry or xs number (-1: a body constant)
  std::vector<Var> consts;                    // invariant variables
  std::vector<std::pair<int32_t, Var>> carries;  // (source position, initial value)
  std::vector<int32_t> final_only;            // positions whose last value is read after the loop
  std::vector<int32_t> ys;                    // positions whose values of earlier iterations are read after
  std::vector<int32_t> pos_id;                // per position: its xs number (-1: none)
  std::vector<int64_t> pos_offset;            // per position: where its slice starts in a shared xs row
  struct Xs {
    int32_t j;     // position
    int32_t slot;  // -1: the position itself (a constant or an advancing slice); else a constant slot
    int64_t first = 0;  // an advancing slice: the first row iteration 0 reads (of all the slices sharing it)
  };
  std::vector<Xs> xs;
  std::vector<std::pair<Var, int64_t>> reads;  // (variable, iteration) read after the loop
  Var end() const { return start + static_cast<Var>(R * P); }
};

}  // namespace reel::reroll_detail
