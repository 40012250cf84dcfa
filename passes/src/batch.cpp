// The batching pass (vmap): a tape -> the tape that computes it for a whole batch at once.
// Batched values carry the batch on a new leading axis; each call with a batched
// argument is rewritten by its primitive's batching rule (Primitive::batch), so the
// result is an ordinary tape again (printable, differentiable, compilable). Primitives
// without a rule: an elementwise one aligns its batched arguments' batch axis in front
// of the broadcast shape; any other runs once per batch element in a `scan` over the
// batch (correct for every primitive, but one call per element).
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "reel/ir/builder.hpp"
#include "reel/passes.hpp"
#include "reel/ir/body_tape.hpp"
#include "transforms.hpp"

namespace reel {

namespace {

// `t` with the batch axis in front; a reel::Error in vmap's name if the batch makes more
// elements than a tensor may hold (vmap_tape(t, {true}, 2^62) of a sin of f64[3]).
VarType batched_type(const VarType& t, int64_t size) {
  VarType r = t;
  r.shape.insert(r.shape.begin(), size);
  try {
    (void)numel(r.shape);
  } catch (const Error& e) {
    throw Error(fmt::format("vmap: a batch size of {} makes {} of {}: {}", size, type_str(r), type_str(t), e.what()));
  }
  return r;
}

// An elementwise call (numpy broadcasting, aligned at the trailing axes): each batched
// argument is reshaped to [size, 1, ..., 1, its shape] of the result's rank + 1, so that
// its batch axis meets the others' in front and broadcasting does the rest.
Results<Var> batch_elementwise(TapeBuilder& b, const Primitive& p, const BatchArgs& a, const VarType& out) {
  const std::size_t rank = out.shape.size();
  std::vector<Var> args;
  for (std::size_t i = 0; i < a.args.size(); ++i) {
    if (!a.batched[i]) {
      args.push_back(a.args[i]);
      continue;
    }
    const Shape& s = a.types[i].shape;
    Shape shape{a.size};
    shape.insert(shape.end(), rank - s.size(), 1);
    shape.insert(shape.end(), s.begin(), s.end());
    args.push_back(b.reshape(a.args[i], shape));
  }
  return b.call(p, std::move(args), a.attrs);
}

void check_batch_size(int64_t size) {
  if (size < 0) throw Error(fmt::format("vmap: expected a batch size >= 0, got {}", size));
}

}  // namespace

BatchedTape batch_tape(const Tape& f, std::span<const bool> batched, int64_t size) {
  verify("vmap", f);
  check_batch_size(size);
  const std::vector<Var> inputs = f.inputs();
  if (batched.size() != inputs.size())
    throw Error(fmt::format("vmap: expected {} batched flags (one per input), got {}", inputs.size(), batched.size()));
  const Var n = f.size();
  TapeBuilder b;
  b.reserve(2 * static_cast<std::size_t>(n));
  std::vector<Var> map(static_cast<std::size_t>(n) + 1, kNoVar);
  std::vector<bool> is_b(static_cast<std::size_t>(n) + 1, false);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const VarType& t = f.type(inputs[i]);
    map[inputs[i]] = b.input(batched[i] ? batched_type(t, size) : t);
    is_b[inputs[i]] = batched[i];
  }
  for (Var v = 1; v <= n; ++v) {
    const Op& op = f.op(v);
    if (op.kind == OpKind::input || op.kind == OpKind::result) continue;  // (results: with their call)
    std::vector<Var> args;
    bool any = false;
    for (Var a : op.args) {
      args.push_back(map[a]);
      any = any || is_b[a];
    }
    if (!any) {
      map[v] = b.copy(op, args);
      for (Var r = v + 1; r < v + op.results; ++r) map[r] = b.copy(f.op(r), {map[v]});
      continue;
    }
    Flags flags(op.args.size());
    std::vector<VarType> types;
    for (std::size_t i = 0; i < op.args.size(); ++i) {
      flags[i] = is_b[op.args[i]];
      types.push_back(f.type(op.args[i]));
    }
    BatchArgs a{args, flags, types, size, op.attrs,
                &detail::pass_transforms()};
    std::vector<Var> res;
    if (op.prim->batch) {
      res = op.prim->batch(b, a);
      check_result_count(*op.prim, "vmap: the batching rule", res.size());
    } else if (op.prim->structure == Structure::elementwise && op.results == 1) {
      res = batch_elementwise(b, *op.prim, a, op.type);
    } else {
      res = batch_by_scan(b, *op.prim, a);  // (ir/src/prims_scan.cpp)
    }
    if (res.size() != static_cast<std::size_t>(op.results))
      throw Error(fmt::format("vmap: the batching rule of '{}' gave {} results, expected {}", op.prim->name,
                              res.size(), op.results));
    for (std::size_t i = 0; i < res.size(); ++i) {
      const Var r = v + static_cast<Var>(i);
      const VarType want = batched_type(f.type(r), size);
      if (b.type(res[i]) != want)
        throw Error(fmt::format("vmap: the batching rule of '{}' returned {}{}, expected {}", op.prim->name,
                                type_str(b.type(res[i])),
                                res.size() == 1 ? "" : fmt::format(" for result {}", i + 1), type_str(want)));
      map[r] = res[i];
      is_b[r] = true;
    }
  }
  BatchedTape out;
  std::vector<Var> outputs;
  for (Var o : f.outputs) {
    outputs.push_back(map[o]);
    out.batched.push_back(is_b[o]);
  }
  b.set_outputs(std::move(outputs));
  out.tape = b.finish();
  return out;
}

Tape vmap_tape(const Tape& f, std::span<const bool> batched, int64_t size) {
  BatchedTape r = batch_tape(f, batched, size);
  const Tape& t = r.tape;
  bool all = true;
  for (bool x : r.batched) all = all && x;
  if (all) return cleanup(t);
  // Broadcast the outputs that came out unbatched (they depend on no batched input).
  TapeBuilder b;
  std::vector<Var> ins;
  for (Var in : t.inputs()) ins.push_back(b.input(t.type(in)));
  const std::vector<Var> outs = b.inline_tape(t, ins);
  std::vector<Var> final_outs;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (r.batched[i]) {
      final_outs.push_back(outs[i]);
      continue;
    }
    const VarType& ty = b.type(outs[i]);
    final_outs.push_back(b.broadcast_to(outs[i], batched_type(ty, size).shape));
  }
  b.set_outputs(std::move(final_outs));
  return cleanup(b.finish());
}

Tape vmap_tape(const Tape& f, const std::vector<bool>& batched, int64_t size) {
  return vmap_tape(f, Flags(batched), size);
}

Tape batch_body(const Tape& body, std::span<const bool> batched, int64_t size) {
  return vmap_tape(body, batched, size);
}

Tape jvp_tape(const Tape& tape, int64_t k) {
  if (k < 0) throw Error(fmt::format("jvp: expected a number of tangents k >= 0, got {}", k));
  if (k == 0) {
    // No directions: the values, and empty tangents (a loop batched over none would
    // give no row to take the values from).
    verify("jvp", tape);
    TapeBuilder b;
    std::vector<Var> ins;
    for (Var in : tape.inputs()) ins.push_back(b.input(tape.type(in)));
    for (Var in : tape.inputs()) b.input(batched_type(tape.type(in), 0));
    std::vector<Var> outs = b.inline_tape(tape, ins);
    for (Var o : tape.outputs) outs.push_back(b.or_zeros(kNoVar, batched_type(tape.type(o), 0)));
    b.set_outputs(std::move(outs));
    return cleanup(b.finish());
  }
  const Tape j = jvp_tape(tape);
  // j's inputs: the tape's, then one tangent per input (the i64 ones have none).
  const std::size_t all = j.inputs().size(), primal = tape.inputs().size();
  Flags flags(all);
  for (std::size_t i = 0; i < all; ++i) flags[i] = i >= primal;
  BatchedTape r = batch_tape(j, flags, k);
  // The tangent outputs: batched (broadcast where a tangent is zero); the values stay as they are.
  const Tape& t = r.tape;
  TapeBuilder b;
  std::vector<Var> ins;
  for (Var in : t.inputs()) ins.push_back(b.input(t.type(in)));
  std::vector<Var> outs = b.inline_tape(t, ins);
  const std::size_t m = outs.size() / 2;
  // A value computed together with the tangents (a loop's tangent rule runs both in one
  // loop) comes out batched, every row the same: its first row.
  for (std::size_t i = 0; i < m; ++i)
    if (r.batched[i]) {
      const Shape shape = tape.type(tape.outputs[i]).shape;
      outs[i] = b.reshape(b.call(prims::slice(), {outs[i]}, {{"axis", int64_t{0}}, {"start", int64_t{0}}, {"stop", int64_t{1}}}),
                          shape);
    }
  for (std::size_t i = m; i < outs.size(); ++i)
    if (!r.batched[i]) outs[i] = b.broadcast_to(outs[i], batched_type(b.type(outs[i]), k).shape);
  b.set_outputs(std::move(outs));
  return cleanup(b.finish());
}

}  // namespace reel
