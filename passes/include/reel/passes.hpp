#pragma once
// Tape-to-tape passes. Each takes a tape and returns a new one; none changes its
// argument. `reel-opt` (tools/) runs them by name from the command line.
#include <functional>
#include <iosfwd>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel {

// Reverse mode. The tape must have one output. Without a seed it must be a 0-d
// scalar and the adjoint starts at 1; with a seed, the seed is a new last input of
// the output's type (a vector-Jacobian product). The result returns the value and
// then the gradient of every input, in input order (zeros for inputs the output does
// not depend on). Only operations on a path from an input to the output get adjoints.
// These return the raw reverse tape; grad_tape / vjp_tape also simplify it.
Tape reverse_mode(const Tape& tape);
Tape reverse_mode_seeded(const Tape& tape);

// Forward mode. The result takes the inputs and then one tangent per input (of the
// input's type), and returns the outputs and then each output's tangent (its
// directional derivative along the input tangents; zeros where it depends on no
// input). A primitive with neither a tangent rule nor the `linear` property is a
// reel::Error naming it. jvp_tape also simplifies.
Tape forward_mode(const Tape& tape);
Tape jvp_tape(const Tape& tape);

// Vector-mode forward: jvp_tape with k tangents per input, each input's stacked on a
// new leading axis ([k] + the input's type; an i64 input's are read by nothing, as in
// jvp_tape), and each output's k
// tangents stacked the same way after the outputs: all k directional derivatives in
// one pass (the forward-mode tape batched over its tangents).
Tape jvp_tape(const Tape& tape, int64_t k);

// Batching (vmap). The tape computed for a batch: the inputs where batched[i] get a
// new leading axis of `size` (the batch), and each operation that reads a batched value
// is rewritten by its primitive's batching rule (Primitive::batch; elementwise ones
// without a rule align the batch axis and broadcast; any other runs once per element
// in a `scan` over the batch). batch_tape also says which outputs came out batched
// (those that depend on a batched input); vmap_tape broadcasts the others, so that
// every output has the batch in front, and cleans up.
struct BatchedTape {
  Tape tape;
  std::vector<bool> batched;  // per output
};
BatchedTape batch_tape(const Tape& tape, std::span<const bool> batched, int64_t size);
Tape vmap_tape(const Tape& tape, std::span<const bool> batched, int64_t size);
Tape vmap_tape(const Tape& tape, const std::vector<bool>& batched, int64_t size);

// Common-subexpression elimination: calls with equal primitive, arguments (in either
// order for add and mul) and attributes, and constants of equal type and value, are
// merged into the first one. Calls of primitives that are not `pure` are never merged.
Tape cse(const Tape& tape);

// Dead-code elimination: drops operations no output depends on. Inputs stay, since
// they are the tape's signature.
Tape dce(const Tape& tape);

// Exact algebraic identities: x*1, 1*x, x+(-0), x-(+0), x/1 -> x and -(-x) -> x, where
// x already has the result's type (so no broadcast is lost). Not x+0: -0+0 is +0.
Tape simplify(const Tape& tape);

// The cleanup passes: simplify, cse and dce, in that order. The result is marked
// `cleaned` (Tape::cleaned), as is that of any PassPipeline ending with them.
Tape cleanup(const Tape& tape);
const std::vector<std::string>& cleanup_pass_names();

// reverse_mode (or reverse_mode_seeded) followed by simplify, cse and dce; reroll first
// when auto_reroll() is on (as jvp_tape). A tape not marked cleaned (a traced one) is
// cleaned up before it is differentiated too (derivative_pipeline), so that repeated
// work a trace recorded (a scalar program that computes the same minor many times) is
// differentiated once.
Tape grad_tape(const Tape& tape);
Tape vjp_tape(const Tape& tape);

// Re-rolling of traced loops: finds long runs of structurally identical segments (what
// a plain C++ `for` loop records when traced) and folds each into one `scan`, so that a
// traced loop is differentiated, planned and compiled once per body, not once per
// iteration. A run folds when every iteration does the same operations with the same
// attributes and types, each argument being a value of the same iteration, of the
// previous one (a carry), the same variable from before the loop (a loop invariant) or
// a constant (values that differ per iteration are stacked into an xs), and a slice of
// a loop invariant along its leading axis may advance by a fixed step (an xs:
// `reel::index(sequence, t)`). A dependency two iterations back, another operation or
// other attributes end the run. Values of the last iteration read after the loop come
// out as its final carries, those of earlier iterations as stacked ys that later
// readers slice. The values computed are the same, operation for operation (the
// scan's body is the iteration's operations); only the tape's shape changes.
struct RerollOptions {
  int64_t min_repeats = 8;       // fewest iterations folded (at least 3)
  int64_t min_ops = 64;          // fewest operations (iterations x body) folded
  int64_t max_period = 1 << 20;  // most operations in a body
  bool nested = true;            // re-roll the bodies too (loops in loops)
  // How reverse mode keeps the scans' residuals (the scan attributes checkpoint and
  // checkpoint_arg): "" stores all; "every" (k), "sqrt", "binomial" (snapshots).
  std::string checkpoint = "";
  int64_t checkpoint_arg = 0;
};
Tape reroll(const Tape& tape);
Tape reroll(const Tape& tape, const RerollOptions& options);

// Vectorizing re-rolled loops: a scan whose iterations carry nothing from one to the
// next but reductions (a carry updated by add, mul, maximum or minimum with a value
// that depends on no carry, or by subtracting one: `s += f(x[i])`, `s -= f(x[i])`,
// `m = std::max(m, x[i])`) becomes its body batched over the iterations (vmap) and
// the matching reduce (sum, prod, max, min); its ys come out of the batched body
// stacked. Scans with a true recurrence stay scans, with their bodies vectorized
// (nested loops). Left alone: reverse scans, scans reading their counter, scans with
// a checkpoint policy, scans of fewer than two iterations, f32 sums and products,
// bodies with a guard, an impure primitive or a while_loop, and batches past 2^27
// elements (passes/src/vectorize.cpp). Sums are then added in another order than the
// loop's. Runs after reroll wherever auto_reroll() is on.
Tape vectorize(const Tape& tape);

// Whether grad_tape, vjp_tape, jvp_tape and reel::compile (on a tape not yet cleaned: a
// traced one) run reroll first. On unless the environment variable REEL_REROLL is 0
// (read once; any value but 0 and 1 gets one warning and leaves it on) or
// set_auto_reroll(false) was called (which overrides the variable; it returns the
// setting it replaces, so a caller can put it back).
bool auto_reroll();
bool set_auto_reroll(bool on);
// `names` with "reroll" and "vectorize" in front when auto_reroll() is on.
std::vector<std::string> with_auto_reroll(std::vector<std::string> names);
// What reel::compile runs on a tape not marked cleaned: reroll (when auto_reroll())
// and the cleanup passes.
Tape cleanup_traced(const Tape& tape);
// The passes grad_tape, vjp_tape and jvp_tape run: reroll and vectorize (when
// auto_reroll()), on a tape not marked cleaned the cleanup passes, then `derivative`
// ("grad", "vjp" or "jvp") and the cleanup passes.
Tape derivative_pipeline(const std::string& derivative, const Tape& tape);

using Pass = std::function<Tape(const Tape&)>;

// Passes by name: "grad", "vjp", "jvp", "simplify", "cse", "dce", "reroll", "vectorize".
std::vector<std::string> pass_names();
const Pass& find_pass(const std::string& name);  // throws reel::Error for unknown names

// Runs named passes in order; marks the result `cleaned` if the last passes are
// cleanup_pass_names().
//
// Like LLVM's -print-after-all and -print-after=NAME, it can print the tape after each
// pass, or after the passes named, to standard error (or `print_to`'s stream), each
// under a header naming the pass: "# *** Tape after cse ***" (a comment of the tape's
// text form, so a dump parses back). The environment variable REEL_PRINT_AFTER_ALL=1
// turns print-after-all on for every PassPipeline of the process (grad_tape, jvp_tape
// and cleanup run one): it is read once, when the first PassPipeline is made; unset,
// empty or 0 is off, and any other value gets one warning on standard error and is off.
class PassPipeline {
 public:
  explicit PassPipeline(std::vector<std::string> names);
  Tape run(const Tape& tape) const;
  const std::vector<std::string>& names() const { return names_; }

  PassPipeline& print_after_all(bool on = true);      // overrides REEL_PRINT_AFTER_ALL
  PassPipeline& print_after(const std::string& pass);  // a reel::Error for an unknown pass name
  PassPipeline& print_to(std::ostream& out);           // where dumps go (std::cerr until set)

 private:
  void dump_after(std::size_t i, const Tape& tape) const;

  std::vector<std::string> names_;
  std::vector<const Pass*> passes_;
  bool ends_with_cleanup_ = false;
  bool print_all_;
  std::set<std::string> print_after_;
  std::ostream* out_ = nullptr;
};

namespace detail {
// REEL_PRINT_AFTER_ALL's value (nullptr when unset): "1" is on; nullptr, "" and "0" are
// off; anything else is off and sets `warning` to say why.
bool print_after_all_setting(const char* value, std::string& warning);
// REEL_REROLL's value (nullptr when unset): "0" is off; nullptr, "" and "1" are on;
// anything else is on and sets `warning` to say so.
bool reroll_setting(const char* value, std::string& warning);
// reroll's result, or nothing when it folds no loop (so that a caller need not copy).
std::optional<Tape> reroll_if_any(const Tape& tape, const RerollOptions& options);
}  // namespace detail

}  // namespace reel
