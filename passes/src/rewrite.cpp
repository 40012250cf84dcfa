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

namespace {

// Op is copied member by member in TapeBuilder::copy too (ir/src/builder.cpp).
static_assert(sizeof(Op) == 184, "a member added to Op: copy it in rewrite_ops");

template <class Take>
Tape rewrite_each(const char* pass, const Tape& tape, const OpStep& step, Take take) {
  check_structure(pass, tape);
  TapeBuilder b;
  b.reserve(static_cast<std::size_t>(tape.size()));
  std::vector<Var> map(static_cast<std::size_t>(tape.size()) + 1, kNoVar);
  for (Var v = 1; v <= tape.size(); ++v) map[static_cast<std::size_t>(v)] = step(b, v, take(v, map));
  std::vector<Var> outs;
  for (Var o : tape.outputs) outs.push_back(map[static_cast<std::size_t>(o)]);
  b.set_outputs(std::move(outs));
  return b.finish();
}

}  // namespace

Tape rewrite_ops(const char* pass, const Tape& tape, const OpStep& step) {
  return rewrite_each(pass, tape, step, [&](Var v, const std::vector<Var>& map) {
    const Op& op = tape.op(v);
    std::vector<Var> args;
    args.reserve(op.args.size());
    for (Var a : op.args) args.push_back(map[static_cast<std::size_t>(a)]);
    return Op{op.kind, op.prim, std::move(args), op.attrs, op.index, op.type, op.value, op.results};
  });
}

Tape rewrite_ops(const char* pass, Tape&& tape, const OpStep& step) {
  return rewrite_each(pass, tape, step, [&](Var v, const std::vector<Var>& map) {
    Op& op = tape.ops[static_cast<std::size_t>(v - 1)];
    for (Var& a : op.args) a = map[static_cast<std::size_t>(a)];
    return std::move(op);
  });
}

}  // namespace reel::passes
