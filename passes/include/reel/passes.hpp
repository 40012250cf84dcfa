#pragma once
// Tape-to-tape passes. Each takes a tape and returns a new one; none changes its
// argument. `reel-opt` (tools/) runs them by name from the command line.
#include <functional>
#include <iosfwd>
#include <set>
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

// reverse_mode (or reverse_mode_seeded) followed by simplify, cse and dce.
Tape grad_tape(const Tape& tape);
Tape vjp_tape(const Tape& tape);

using Pass = std::function<Tape(const Tape&)>;

// Passes by name: "grad", "vjp", "jvp", "simplify", "cse", "dce".
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
}  // namespace detail

}  // namespace reel
