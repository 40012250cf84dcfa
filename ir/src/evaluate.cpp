#include "reel/ir/evaluate.hpp"

#include <fmt/format.h>

namespace reel {

std::vector<Tensor> run_tape(const char* op_name, const Tape& tape, const std::vector<Tensor>& args,
                             const CallRule& call) {
  check_structure(op_name, tape);
  check_args(op_name, tape, args);
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
          Results<Tensor> outs = call(op, in);
          if (outs.size() != static_cast<std::size_t>(op.results))
            throw Error(fmt::format("{}: %{} = {}: gave {} results, the tape has {}", op_name, v, op.prim->name,
                                    outs.size(), op.results));
          for (std::size_t i = 0; i < outs.size(); ++i) env[v + static_cast<Var>(i)] = std::move(outs[i]);
        } catch (const GuardFailure& e) {  // name the guard
          throw GuardFailure(fmt::format("{}: %{} = {}(%{}): {}", op_name, v, op.prim->name, op.args.at(0), e.what()));
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

std::vector<Tensor> evaluate(const Tape& tape, const std::vector<Tensor>& args) {
  return run_tape("evaluate", tape, args, [&tape](const Op& op, std::span<const Tensor> in) {
    Results<Tensor> outs = op.prim->eager(in, op.attrs);
    check_result_count(*op.prim, "the eager function", outs.size());
    for (std::size_t i = 0; i < outs.size() && i < static_cast<std::size_t>(op.results); ++i) {
      const Var r = static_cast<Var>(&op - tape.ops.data()) + 1 + static_cast<Var>(i);
      const VarType& want = tape.type(r);
      if (!outs[i].defined() || outs[i].dtype() != want.dtype || outs[i].shape() != want.shape)
        throw Error(fmt::format("{}: the eager function made {}, the tape says {}", op.prim->name,
                                outs[i].defined() ? type_str(outs[i].dtype(), outs[i].shape()) : "undefined",
                                type_str(want)));
    }
    return outs;
  });
}

}  // namespace reel
