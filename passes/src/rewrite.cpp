#include "rewrite.hpp"

namespace reel::passes {

Tape rewrite(const char* pass, const Tape& tape, const RewriteStep& step) {
  check_structure(pass, tape);
  TapeBuilder b;
  b.reserve(static_cast<std::size_t>(tape.size()));
  std::vector<Var> map(static_cast<std::size_t>(tape.size()) + 1, kNoVar);
  for (Var v = 1; v <= tape.size(); ++v) {
    const Op& op = tape.op(v);
    std::vector<Var> args;
    for (Var a : op.args) args.push_back(map[a]);
    map[v] = step(b, v, op, std::move(args));
  }
  std::vector<Var> outs;
  for (Var o : tape.outputs) outs.push_back(map[o]);
  b.set_outputs(std::move(outs));
  return b.finish();
}

}  // namespace reel::passes
