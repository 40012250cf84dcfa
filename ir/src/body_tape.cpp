// The body-tape toolkit (reel/ir/body_tape.hpp).
#include "reel/ir/body_tape.hpp"

#include <algorithm>

namespace reel {

Flags::Flags(std::size_t n, bool value) : data_(std::make_unique<bool[]>(n)), size_(n) {
  std::fill(data_.get(), data_.get() + n, value);
}

Flags::Flags(const std::vector<bool>& flags) : data_(std::make_unique<bool[]>(flags.size())), size_(flags.size()) {
  std::copy(flags.begin(), flags.end(), data_.get());
}

std::vector<Var> var_map(const Tape& tape) {
  return std::vector<Var>(static_cast<std::size_t>(tape.size()) + 1, kNoVar);
}

void copy_ops(TapeBuilder& to, const Tape& from, std::vector<Var>& map, const std::function<bool(Var)>& keep,
              const std::function<Var(Var)>& rename) {
  for (Var v = 1; v <= from.size(); ++v) {
    if (!keep(v)) continue;
    const Op& op = from.op(v);
    if (op.kind == OpKind::constant) {
      map[v] = to.constant(op.value);
      continue;
    }
    std::vector<Var> args;
    for (Var x : op.args) args.push_back(rename ? rename(x) : map[x]);
    map[v] = to.copy(op, std::move(args));
  }
}

std::vector<bool> depends_per_var(const Tape& tape, const std::vector<bool>& in) {
  std::vector<bool> dep(static_cast<std::size_t>(tape.size()) + 1, false);
  const std::vector<Var> inputs = tape.inputs();
  for (std::size_t i = 0; i < inputs.size(); ++i) dep[inputs[i]] = in[i];
  for (Var v = 1; v <= tape.size(); ++v)
    for (Var x : tape.op(v).args) dep[v] = dep[v] || dep[x];
  return dep;
}

std::vector<bool> depends_on(const Tape& tape, const std::vector<bool>& in) {
  const std::vector<bool> dep = depends_per_var(tape, in);
  std::vector<bool> out;
  for (Var o : tape.outputs) out.push_back(dep[o]);
  return out;
}

std::vector<bool> reaches(const Tape& tape, const std::vector<bool>& out) {
  std::vector<bool> needed(static_cast<std::size_t>(tape.size()) + 1, false);
  for (std::size_t o = 0; o < tape.outputs.size(); ++o)
    if (out[o]) needed[tape.outputs[o]] = true;
  for (Var v = tape.size(); v >= 1; --v)
    if (needed[v])
      for (Var x : tape.op(v).args) needed[x] = true;
  std::vector<bool> in;
  for (Var i : tape.inputs()) in.push_back(needed[i]);
  return in;
}

void carries_fixed_point(const Tape& body, Flow flow, std::vector<bool>& flags, std::size_t first, std::size_t K,
                         const std::function<bool(std::size_t)>& may) {
  const bool forward = flow == Flow::forward;
  for (bool changed = true; changed;) {
    changed = false;
    // forward: the outputs depending on a flagged input; backward: the inputs reaching a flagged output.
    const std::vector<bool> grows = forward ? depends_on(body, flags) : reaches(body, flags);
    for (std::size_t c = 0; c < K; ++c) {
      const std::size_t flag = forward ? first + c : c, cause = forward ? c : first + c;
      if (!flags[flag] && grows[cause] && (!may || may(c))) flags[flag] = changed = true;
    }
  }
}

TapeParts split_parts(const Tape& tape, const std::vector<char>& input_part, char last, std::size_t first_output) {
  TapeParts p;
  const Var n = tape.size();
  p.part.assign(static_cast<std::size_t>(n) + 1, 0);
  const std::vector<Var> inputs = tape.inputs();
  for (std::size_t i = 0; i < inputs.size(); ++i) p.part[inputs[i]] = input_part[i];
  for (Var v = 1; v <= n; ++v)
    for (Var x : tape.op(v).args) p.part[v] = std::max(p.part[v], p.part[x]);
  p.read.assign(static_cast<std::size_t>(n) + 1, false);
  for (Var v = 1; v <= n; ++v)
    if (p.part[v] == last)
      for (Var x : tape.op(v).args) p.read[x] = p.read[x] || p.part[x] != last;
  for (std::size_t o = first_output; o < tape.outputs.size(); ++o)
    if (p.part[tape.outputs[o]] != last) p.read[tape.outputs[o]] = true;
  return p;
}

}  // namespace reel
