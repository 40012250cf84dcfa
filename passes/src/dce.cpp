#include "reel/ir/builder.hpp"
#include "reel/passes.hpp"

namespace reel {

Tape dce(const Tape& tape) {
  check_structure("dce", tape);
  std::vector<bool> live(tape.size() + 1, false);
  for (Var o : tape.outputs) live[o] = true;
  for (Var v = tape.size(); v >= 1; --v) {
    const Op& op = tape.op(v);
    if (op.kind == OpKind::input) live[v] = true;  // inputs are the signature
    if (live[v])
      for (Var a : op.args) live[a] = true;
  }
  TapeBuilder b;
  std::vector<Var> map(tape.size() + 1, kNoVar);
  for (Var v = 1; v <= tape.size(); ++v) {
    if (!live[v]) continue;
    std::vector<Var> args;
    for (Var a : tape.op(v).args) args.push_back(map[a]);
    map[v] = b.copy(tape.op(v), std::move(args));
  }
  std::vector<Var> outs;
  for (Var o : tape.outputs) outs.push_back(map[o]);
  b.set_outputs(std::move(outs));
  return b.finish();
}

}  // namespace reel
