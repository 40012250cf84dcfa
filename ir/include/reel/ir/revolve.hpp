#pragma once
// Revolve's binomial checkpointing schedule (Griewank and Walther, "Algorithm 799:
// revolve", ACM TOMS 26(1), 2000): how to reverse `steps` steps of a recurrence (run
// each step's adjoint, last step first) while holding at most `snapshots` states at
// once, the one before step 0 among them, with the fewest steps recomputed. The
// `revolve` primitive (a scan's backward half under binomial checkpointing) runs it on
// tensors; a code generator may run it on buffers with compiled bodies.
#include <cstdint>
#include <functional>

namespace reel {

// What the schedule asks for. States live in snapshots + 1 slots: slot 0 holds the
// state before step 0 on entry; slot `snapshots` is a working slot, not a snapshot.
struct RevolveActions {
  // advance: write into slot `to_slot` the state before step `to`, from the state before
  // step `from` (< to) held in slot `from_slot` (another slot), running steps from .. to - 1.
  std::function<void(int from_slot, int64_t from, int to_slot, int64_t to)> advance;
  // turn (firsturn / youturn): step `step` from the state before it held in `slot`,
  // recording what its adjoint reads, then that adjoint.
  std::function<void(int slot, int64_t step)> turn;
};

// Runs the schedule: turns step steps - 1, ..., 0 in that order, each after the
// advances that bring its state about. Throws reel::Error for steps < 0 or snapshots < 1.
// Snapshots beyond one per step change nothing (the schedule keeps every state), so
// it uses revolve_slots(steps, snapshots) slots, numbered from 0, whatever was asked
// (Checkpoint::binomial(2^40) on 100 steps holds at most 100 states, not 2^40).
void revolve(int64_t steps, int64_t snapshots, const RevolveActions& actions);
int64_t revolve_slots(int64_t steps, int64_t snapshots);

// The step at which the schedule keeps the next state when reversing `steps` >= 2 steps
// with `snapshots` >= 2: the largest optimal split.
int64_t revolve_split(int64_t steps, int64_t snapshots);

// The number of steps the schedule advances (recomputes) in all: t l - C(c + t, t - 1)
// for l steps and c snapshots, t the least repetition number with C(c + t, t) >= l
// (Griewank 1992), l (l - 1) / 2 with one snapshot. Saturates at INT64_MAX.
int64_t revolve_advances(int64_t steps, int64_t snapshots);

}  // namespace reel
