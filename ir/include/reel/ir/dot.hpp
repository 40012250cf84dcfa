#pragma once
// Pictures of tapes: Graphviz DOT text (render with `dot -Tsvg tape.dot -o tape.svg`).
#include <string>
#include <vector>

#include "reel/ir/tape.hpp"

namespace reel {

// A group of operations drawn in a box of its own (a fused kernel: reel::plan_dot).
struct DotCluster {
  std::string label;
  std::vector<Var> vars;
};

struct DotOptions {
  // A gradient tape's two parts told apart: the operations its first output (the
  // value) depends on are the forward part (blue), the others the adjoint part
  // (orange). reel-opt --dot sets it when its passes include grad or vjp.
  bool gradient = false;
  std::vector<DotCluster> clusters;  // boxes; a variable in at most one
  std::string title;                 // the graph's label (none if empty)
};

// The tape as a DOT digraph: a node per operation (inputs as ellipses, constants as
// notes, calls as boxes naming the primitive and its attributes), an edge per argument
// labelled with its type, the outputs as a final node; a loop's body tapes (scan,
// while_loop, call, checkpoint) drawn inside a box of their own next to the loop's node.
// Throws reel::Error for a malformed tape or a cluster naming a variable not on it, or
// one variable twice.
std::string to_dot(const Tape& tape, const DotOptions& options = {});

}  // namespace reel
