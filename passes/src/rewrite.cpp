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

Tape rewrite_ops(const char* pass, const Tape& tape, const OpStep& step) {
  return rewrite(pass, tape, [&](TapeBuilder& b, Var v, const Op& op, std::vector<Var> args) {
    return step(b, v, TapeBuilder::renamed(op, std::move(args)));
  });
}

Var InPlace::take(Op op) {
  if (count_ >= next_)  // (a step that takes two operations for one would overwrite one unread)
    throw Error("compact: internal error: a step kept more operations than it was given");
  t_.ops[static_cast<std::size_t>(count_)] = std::move(op);
  return ++count_;
}

Var InPlace::copy(const Op& op, std::vector<Var> args) {
  return take(TapeBuilder::renamed(op, std::move(args)));
}

Tape compact(Tape&& tape, const CompactStep& step) {
  // (Not checked: compact runs on a tape a pass of the pipeline has just made, well formed
  // by construction, PassPipeline::run; `rewrite` checks a caller's.)
  InPlace b(tape);
  std::vector<Var> map(static_cast<std::size_t>(tape.size()) + 1, kNoVar);
  for (Var v = 1; v <= tape.size(); ++v) {
    Op op = std::move(tape.ops[static_cast<std::size_t>(v - 1)]);
    for (Var& a : op.args) a = map[static_cast<std::size_t>(a)];
    b.next_ = v;
    map[static_cast<std::size_t>(v)] = step(b, v, std::move(op));
  }
  tape.ops.erase(tape.ops.begin() + b.count_, tape.ops.end());
  // (A tape CSE halved keeps its array no larger than it needs: the next pass reads it
  // while it builds another.)
  if (tape.ops.size() < tape.ops.capacity() / 2) tape.ops.shrink_to_fit();
  for (Var& o : tape.outputs) o = map[static_cast<std::size_t>(o)];
  tape.cleaned = false;
  return std::move(tape);
}

}  // namespace reel::passes
