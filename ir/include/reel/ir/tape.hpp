#pragma once
// reel::Tape: a linear SSA program. Each operation defines one variable (%1, %2, ...,
// in order): a function input, a constant, or a call of a primitive on earlier
// variables. Every variable has a dtype and a shape. The tape's outputs list
// variables. See docs/tape-format.md for the text form.
//
// A call of a primitive with k > 1 results defines its first result and is followed
// at once by k - 1 `result` operations, which define the others (args = {the call},
// index = 1 .. k-1); the text form writes the k variables on one line. So variable v
// is still ops[v - 1].
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "reel/ir/primitive.hpp"
#include "reel/large_blocks.hpp"

namespace reel {

enum class OpKind { input, constant, call, result };

struct Op {
  OpKind kind = OpKind::call;
  const Primitive* prim = nullptr;  // calls only
  std::vector<Var> args;            // calls only
  Attrs attrs;                      // calls only
  int32_t index = 0;                // result: which result of the call in args[0]
  VarType type;
  Tensor value;                     // constants only
  // calls only: how many variables the call defines (it and its `result` operations);
  // prim->results, or for a primitive with a variadic count (a loop) its type rule's count.
  int32_t results = 1;
};

class Tape {
 public:
  // Variable v is ops[v - 1]. (A traced tape of millions of operations is hundreds of
  // megabytes: its array is mapped in huge pages, reel/large_blocks.hpp.)
  std::vector<Op, detail::LargeBlockAllocator<Op>> ops;
  std::vector<Var> outputs;
  // Set on the result of a pass pipeline that ends with the cleanup passes (simplify,
  // cse, dce), so on what grad_tape, vjp_tape and jvp_tape return; reel::compile runs
  // those passes only on a tape without it (a traced, parsed or hand-built one).
  // Everything else that makes a tape leaves it false, and code that changes a tape's
  // ops or outputs in place must reset it (select_outputs does). A stale mark costs
  // optimisation, not correctness: compiled code runs any verified tape.
  bool cleaned = false;

  const Op& op(Var v) const { return ops.at(static_cast<std::size_t>(v - 1)); }
  const VarType& type(Var v) const { return op(v).type; }
  int32_t size() const { return static_cast<int32_t>(ops.size()); }
  std::vector<Var> inputs() const;
  std::vector<VarType> input_types() const;
  int32_t count(OpKind kind) const;
};

// Text form (docs/tape-format.md). parse_tape(to_string(t)) prints back identically.
std::string to_string(const Tape& tape);
Tape parse_tape(std::string_view text);
// The same operations, attributes (nested tapes compared alike, at any depth), constants
// (bit for bit) and outputs: what equal texts say, without printing either tape.
bool same_tape(const Tape& a, const Tape& b);

// Checks a call's argument count and attributes (putting the attributes in the
// primitive's order, and integers given for real attributes into doubles) and returns
// the result type. Throws reel::Error naming the primitive and what is wrong.
VarType infer_call(const Primitive& prim, std::span<const VarType> args, Attrs& attrs);
// The same for any primitive: one type per result.
Results<VarType> infer_call_results(const Primitive& prim, std::span<const VarType> args, Attrs& attrs);

// Checks that a tape is well formed (ordering, arities, attributes, types); throws
// reel::Error naming the variable and the problem.
void verify(const Tape& tape);
// The same, its errors in the name of `op` (grad, jvp: a transformation checks its input first).
void verify(const char* op, const Tape& tape);

// The cheap part of verify, which every pass and the interpreter run first so that a
// hand-built tape with dangling variables is an error, not a crash: each call has a
// primitive and as many arguments as it takes, all defined before it; outputs exist.
void check_structure(const char* op, const Tape& tape);

// Throws reel::Error naming `op`, the argument, and the expected and given types if
// `args` do not match the tape's inputs in count, dtype and shape.
void check_args(const char* op, const Tape& tape, const std::vector<Tensor>& args);
void check_args(const char* op, std::span<const VarType> expected, std::span<const Tensor> args);

// Liveness: for each variable v (index v; index 0 unused), the last operation that
// reads it, or kNoVar if none does. Outputs are not counted as reads: a caller that
// keeps outputs checks tape.outputs itself. The interpreter frees each intermediate
// after its last use with it.
std::vector<Var> last_uses(const Tape& tape);

// A copy of the tape that returns only the outputs at the given positions.
Tape select_outputs(const Tape& tape, const std::vector<int>& positions);

}  // namespace reel

template <>
struct fmt::formatter<reel::Tape> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(const reel::Tape& tape, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(reel::to_string(tape), ctx);
  }
};
