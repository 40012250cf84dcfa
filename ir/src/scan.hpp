#pragma once
// Internal: the scan primitive in parts. prims_scan.cpp: the loop itself (type rule,
// eager rule), forward mode and batching; scan_grad.cpp: reverse mode in two halves;
// scan_checkpoint.cpp: the form a checkpoint policy gives the loop (every, sqrt) and the
// split of its vjp into the two halves.
#include <memory>
#include <vector>

#include "prims.hpp"
#include "reel/ir/loop_params.hpp"

namespace reel::prims {

// The attributes of a scan derived from the call whose attributes are `a` (read as s):
// another body and counts, reverse flipped where `flip`; the rest as the call's.
Attrs with_body(const ScanParams& s, const Attrs& a, Tape body, std::size_t num_consts, std::size_t num_carry,
                bool flip = false);

// Reverse mode (scan_grad.cpp): Primitive::adjoint_forward and Primitive::adjoint.
ForwardHalf scan_forward(TapeBuilder& b, const ForwardArgs& a);
std::vector<Var> scan_adjoint(TapeBuilder& b, const AdjointArgs& a);

// Checkpointing every s.segment iterations (every, sqrt): the scan as a tape of the
// call's arguments (of `types`) in which segments of the loop run under `checkpoint`.
Tape segmented(const ScanParams& s, const std::vector<VarType>& types);

// Reverse mode of a tape E (equal to a call) in two halves, by splitting its vjp: the
// forward half is what reads no seed (E's results, and the residuals: the values the
// rest reads), the backward half the rest.
struct SplitVjp {
  Tape V;
  std::size_t nin = 0, nout = 0;
  std::vector<bool> seeded, wanted;
  std::vector<char> part;      // per variable of V: 1 where it reads a seed (backward), else 0
  std::vector<Var> residuals;  // forward variables the backward half reads (not constants: copied)
};
std::shared_ptr<const SplitVjp> split_vjp(const Tape& E, std::vector<bool> seeded, std::vector<bool> wanted,
                                          const Transforms& tr);
// The forward half on the call's arguments: E's results and the residuals.
ForwardHalf emit_forward(TapeBuilder& b, const SplitVjp& sp, std::span<const Var> args);
// The backward half: the arguments' gradients (kNoVar where not wanted).
std::vector<Var> emit_backward(TapeBuilder& b, const SplitVjp& sp, std::span<const Var> residuals,
                               std::span<const Var> douts);

}  // namespace reel::prims
