#pragma once
// The body-tape toolkit: what the rules of the loop primitives (and the passes that
// build loops) do to a loop's body, each written once: copy a tape's operations into
// another under a map of variables, flood dependences forward (which variables depend
// on flagged inputs) and backward (which inputs reach flagged outputs), take a loop's
// carries to a fixed point, and split a vjp tape into parts (loop-invariant, per
// iteration, backward) with the values one part hands the next. Flags are
// std::vector<bool>; Flags is their form for reel::Transforms, which take a
// std::span<const bool>.
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "reel/ir/builder.hpp"
#include "reel/ir/tape.hpp"

namespace reel {

// A fixed number of flags as a contiguous bool array: std::span<const bool> of a
// std::vector<bool> (which packs its bits).
class Flags {
 public:
  Flags() = default;
  explicit Flags(std::size_t n, bool value = false);
  Flags(const std::vector<bool>& flags);  // NOLINT(google-explicit-constructor): a view for the transforms
  bool& operator[](std::size_t i) { return data_[i]; }
  bool operator[](std::size_t i) const { return data_[i]; }
  std::size_t size() const { return size_; }
  operator std::span<const bool>() const { return {data_.get(), size_}; }  // NOLINT(google-explicit-constructor)

 private:
  std::unique_ptr<bool[]> data_;
  std::size_t size_ = 0;
};

// ---- Copy and rename ----

// A map from the variables of `tape` (index: the variable) to another tape's, all kNoVar.
std::vector<Var> var_map(const Tape& tape);
// Copies into `to`, in order, each operation of `from` that `keep` accepts (an input as
// a new input, a constant as a constant), its arguments renamed through `rename`
// (default: map[x]), and records its new variable in map.
void copy_ops(TapeBuilder& to, const Tape& from, std::vector<Var>& map, const std::function<bool(Var)>& keep,
              const std::function<Var(Var)>& rename = {});

// ---- Dependences ----

// Per variable of `tape` (index: the variable): whether it depends on an input flagged
// in `in` (one flag per input).
std::vector<bool> depends_per_var(const Tape& tape, const std::vector<bool>& in);
// Per output of `tape`: whether it depends on an input flagged in `in`.
std::vector<bool> depends_on(const Tape& tape, const std::vector<bool>& in);
// Per input of `tape`: whether an output flagged in `out` (one flag per output) depends on it.
std::vector<bool> reaches(const Tape& tape, const std::vector<bool>& out);

// ---- The carries' fixed point ----

// A loop body's carries: carry c is body input `first + c`, and its next value body
// output c. Forward (batching, tangents; `flags` per input): a carry is flagged when
// its next value depends on a flagged input. Backward (adjoints; `flags` per output): a
// carry is flagged when its input reaches a flagged output. Only carries where
// `may(c)` (default: all); repeated until nothing changes, `flags` updated.
enum class Flow { forward, backward };
void carries_fixed_point(const Tape& body, Flow flow, std::vector<bool>& flags, std::size_t first, std::size_t K,
                         const std::function<bool(std::size_t)>& may = {});

// ---- The forward/backward split ----

// The parts of a tape's variables, small numbers in order (a scan's vjp: loop-invariant
// < per iteration < backward, which reads a seed): each variable's is the largest of its
// arguments', an input's given (per input). And what crosses into the last part: the
// variables of the earlier parts that an operation of part `last` reads or that the
// outputs [first_output, ...) return.
struct TapeParts {
  std::vector<char> part;  // per variable
  std::vector<bool> read;  // per variable: of an earlier part, read by the last
};
TapeParts split_parts(const Tape& tape, const std::vector<char>& input_part, char last, std::size_t first_output);

}  // namespace reel
