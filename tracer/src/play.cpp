#include "reel/play.hpp"

#include <fmt/format.h>

#include "reel/dispatch.hpp"

namespace reel {

std::vector<Tensor> play(const Tape& tape, const std::vector<Tensor>& args) {
  check_structure("play", tape);
  check_args("play", tape, args);
  std::vector<Tensor> env(static_cast<std::size_t>(tape.size()) + 1);
  // Each intermediate is released after its last use, unless it is an output.
  std::vector<Var> last = last_uses(tape);
  for (Var o : tape.outputs) last[static_cast<std::size_t>(o)] = tape.size() + 1;
  std::size_t next_arg = 0;
  std::vector<Tensor> in;
  for (Var v = 1; v <= tape.size(); ++v) {
    const Op& op = tape.op(v);
    switch (op.kind) {
      case OpKind::input: env[v] = args[next_arg++]; break;
      case OpKind::constant: env[v] = op.value; break;
      case OpKind::call: {
        in.clear();
        for (Var a : op.args) in.push_back(env[a]);
        try {  // the results' variables follow the call
          Results<Tensor> outs = detail::apply_list(*op.prim, in, op.attrs);
          for (std::size_t i = 0; i < outs.size(); ++i) env[v + static_cast<Var>(i)] = std::move(outs[i]);
        } catch (const GuardFailure& e) {  // name the guard
          throw GuardFailure(fmt::format("play: %{} = {}(%{}): {}", v, op.prim->name, op.args.at(0), e.what()));
        }
        in.clear();
        break;
      }
      case OpKind::result: break;  // computed with its call
    }
    for (Var a : op.args)
      if (last[static_cast<std::size_t>(a)] == v) env[a] = Tensor();
    if (op.kind != OpKind::input && last[static_cast<std::size_t>(v)] == kNoVar) env[v] = Tensor();  // never read
  }
  std::vector<Tensor> outs;
  for (Var o : tape.outputs) outs.push_back(env[o]);
  return outs;
}

}  // namespace reel
