// Batching of loops (vmap of scan, while_loop, revolve): a loop body batched with
// flags per input and per output (prims.hpp), and its carries' flags.
#include <fmt/format.h>

#include "prims.hpp"
#include "reel/ir/body_tape.hpp"

namespace reel::prims {

Tape batch_loop_body(const Tape& body, const std::vector<bool>& in, const std::vector<bool>& out, int64_t size,
                     const Transforms& transforms) {
  TapeBuilder k;
  const std::vector<Var> inputs = body.inputs();
  std::vector<Var> vin;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const VarType& t = body.type(inputs[i]);
    vin.push_back(k.input(in[i] ? with_leading(size, t) : t));
  }
  std::vector<int> batched;
  for (std::size_t o = 0; o < out.size(); ++o)
    if (out[o]) batched.push_back(static_cast<int>(o));
  std::vector<Var> outs(body.outputs.size(), kNoVar);
  // A check (a guard) that reads a batched value is batched too, even where no output
  // is: it must hold for every batch element.
  const std::vector<bool> dep = depends_per_var(body, in);
  bool batched_effect = false;
  for (Var v = 1; v <= body.size(); ++v)
    batched_effect = batched_effect || (body.op(v).kind == OpKind::call && body.op(v).prim->effect && dep[v]);
  if (!batched.empty() || batched_effect) {
    const Tape B = transforms.batch(select_outputs(body, batched), Flags(in), size);
    const std::vector<Var> bo = k.inline_tape(B, vin);
    for (std::size_t q = 0; q < batched.size(); ++q) outs[static_cast<std::size_t>(batched[q])] = bo[q];
  }
  if (batched.size() < out.size()) {
    // The unbatched outputs: the body's operations that read no batched input, as they are.
    std::vector<Var> map = var_map(body);
    for (std::size_t i = 0; i < inputs.size(); ++i) map[inputs[i]] = vin[i];
    copy_ops(k, body, map, [&](Var v) { return body.op(v).kind != OpKind::input && !dep[v]; });
    for (std::size_t o = 0; o < out.size(); ++o) {
      if (out[o]) continue;
      if (dep[body.outputs[o]])
        throw Error(fmt::format("vmap: output {} of a loop body depends on a batched input but was to stay unbatched "
                                "(internal error)", o + 1));
      outs[o] = map[body.outputs[o]];
    }
  }
  k.set_outputs(std::move(outs));
  return transforms.cleanup(k.finish());
}

std::vector<bool> batch_carries(const Tape& body, std::vector<bool>& in, std::size_t first, std::size_t K) {
  carries_fixed_point(body, Flow::forward, in, first, K);
  std::vector<bool> out = depends_on(body, in);
  for (std::size_t c = 0; c < K; ++c) out[c] = in[first + c];
  return out;
}

Var ensure_batched(TapeBuilder& b, Var v, bool batched, int64_t size) {
  if (batched) return v;
  const VarType t = b.type(v);
  return b.broadcast_to(v, with_leading(size, t).shape);
}

}  // namespace reel::prims
