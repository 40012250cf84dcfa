// scan: a loop whose body is a tape (after jax.lax.scan). The body runs once per
// iteration on the loop-invariant consts, the carries and one slice of each xs, and
// gives the next carries and one slice of each ys:
//
//   %r... = scan(consts..., carries..., xs...) {body={...}, length=N, num_consts=C,
//            num_carry=K[, reverse=true][, index=I]}
//
// Results: the K final carries, then each y stacked on a new leading axis of N.
// `reverse` runs k = N-1 .. 0; with `index`, the body's first input is an i64 counter
// holding I + k. Its reverse mode is in two halves (adjoint_forward): the forward scan
// also stacks the residuals the body's adjoint reads, and a reversed scan runs the
// adjoint; forward mode is one scan over the body's jvp; batching (vmap) is one scan
// over the batched body (scan_batch).
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

#include "batching.hpp"
#include "reel/ir/evaluate.hpp"

namespace reel::prims {

VarType without_leading(const VarType& t) { return {t.dtype, Shape(t.shape.begin() + 1, t.shape.end())}; }
VarType with_leading(int64_t n, const VarType& t) {
  Shape s{n};
  s.insert(s.end(), t.shape.begin(), t.shape.end());
  return {t.dtype, s};
}

// Slice k of x along its leading axis (a copy), and its inverse.
Tensor slice_at(const Tensor& x, int64_t k) {
  Tensor out(x.dtype(), without_leading({x.dtype(), x.shape()}).shape);
  if (out.nbytes() > 0)
    std::memcpy(out.mutable_raw(), static_cast<const char*>(x.raw()) + static_cast<std::size_t>(k) * out.nbytes(),
                out.nbytes());
  return out;
}
void store_at(Tensor& stack, int64_t k, const Tensor& slice) {
  if (slice.nbytes() > 0)
    std::memcpy(static_cast<char*>(stack.mutable_raw()) + static_cast<std::size_t>(k) * slice.nbytes(), slice.raw(),
                slice.nbytes());
}

// Per variable of `tape`: whether it depends on an input flagged in `in`.
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
    auto flags = std::make_unique<bool[]>(in.size());
    std::copy(in.begin(), in.end(), flags.get());
    const Tape B = transforms.batch(select_outputs(body, batched), std::span<const bool>(flags.get(), in.size()), size);
    const std::vector<Var> bo = k.inline_tape(B, vin);
    for (std::size_t q = 0; q < batched.size(); ++q) outs[static_cast<std::size_t>(batched[q])] = bo[q];
  }
  if (batched.size() < out.size()) {
    // The unbatched outputs: the body's operations that read no batched input, as they are.
    std::vector<Var> map(static_cast<std::size_t>(body.size()) + 1, kNoVar);
    for (std::size_t i = 0; i < inputs.size(); ++i) map[inputs[i]] = vin[i];
    for (Var v = 1; v <= body.size(); ++v) {
      const Op& op = body.op(v);
      if (op.kind == OpKind::input || dep[v]) continue;
      std::vector<Var> args;
      for (Var x : op.args) args.push_back(map[x]);
      map[v] = op.kind == OpKind::constant ? k.constant(op.value) : k.copy(op, std::move(args));
    }
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
  std::vector<bool> out;
  for (bool changed = true; changed;) {
    changed = false;
    out = depends_on(body, in);
    for (std::size_t c = 0; c < K; ++c)
      if (out[c] && !in[first + c]) in[first + c] = changed = true;
  }
  for (std::size_t c = 0; c < K; ++c) out[c] = in[first + c];
  return out;
}

Var ensure_batched(TapeBuilder& b, Var v, bool batched, int64_t size) {
  if (batched) return v;
  const VarType t = b.type(v);
  return b.broadcast_to(v, with_leading(size, t).shape);
}

namespace {

// A scan call's layout, read from its attributes and checked against its arguments.
struct ScanLayout {
  int64_t length = 0;
  std::size_t C = 0, K = 0, X = 0, Y = 0;
  bool reverse = false, has_index = false;
  int64_t index0 = 0;
  const Tape* body = nullptr;
  // How reverse mode keeps the residuals: all of them (store), every `segment`-th carry
  // (every, sqrt), or Revolve's schedule with `snapshots` carries (binomial).
  enum class Policy { store, every, binomial } policy = Policy::store;
  int64_t segment = 0, snapshots = 0;
  std::size_t first_const() const { return has_index ? 1 : 0; }  // in the body's inputs
  std::size_t first_carry() const { return first_const() + C; }
  std::size_t first_x() const { return first_carry() + K; }
};

// The checkpoint attributes: "" (store all), "every" with checkpoint_arg k >= 1, "sqrt"
// (k = ceil(sqrt(length))), "binomial" with checkpoint_arg snapshots >= 1.
void read_policy(ScanLayout& s, const Attrs& a) {
  const std::string kind = a.has("checkpoint") ? a.string("checkpoint") : "";
  const bool has_arg = a.has("checkpoint_arg");
  const int64_t arg = has_arg ? a.integer("checkpoint_arg") : 0;
  auto expect_arg = [&](const char* what) {
    if (!has_arg || arg < 1)
      throw Error(fmt::format("scan: checkpoint=\"{}\" expects checkpoint_arg {} >= 1, got {}", kind, what,
                              has_arg ? std::to_string(arg) : "none"));
  };
  if (kind.empty()) {
    if (has_arg) throw Error(fmt::format("scan: checkpoint_arg {} given without a checkpoint policy", arg));
  } else if (kind == "every") {
    expect_arg("(the segment length k of Checkpoint::every(k))");
    s.policy = ScanLayout::Policy::every, s.segment = arg;
  } else if (kind == "sqrt") {
    if (has_arg) throw Error(fmt::format("scan: checkpoint=\"sqrt\" takes no checkpoint_arg, got {}", arg));
    int64_t k = std::max<int64_t>(1, static_cast<int64_t>(std::sqrt(static_cast<double>(s.length))));
    while (k * k < s.length) ++k;  // ceil(sqrt(length)), exactly
    s.policy = ScanLayout::Policy::every, s.segment = k;
  } else if (kind == "binomial") {
    expect_arg("(the snapshots of Checkpoint::binomial(snapshots))");
    s.policy = ScanLayout::Policy::binomial, s.snapshots = arg;
  } else {
    throw Error(fmt::format("scan: expected checkpoint \"\", \"every\", \"sqrt\" or \"binomial\", got \"{}\"", kind));
  }
}

ScanLayout scan_layout(const Attrs& a, std::size_t nargs) {
  ScanLayout s;
  s.body = &a.tape("body");
  s.length = a.integer("length");
  const int64_t C = a.integer("num_consts"), K = a.integer("num_carry");
  if (s.length < 0) throw Error(fmt::format("scan: expected a length >= 0, got {}", s.length));
  if (C < 0 || K < 0 || static_cast<std::size_t>(C + K) > nargs)
    throw Error(fmt::format("scan: num_consts {} and num_carry {} do not fit the {} arguments", C, K, nargs));
  s.C = static_cast<std::size_t>(C), s.K = static_cast<std::size_t>(K), s.X = nargs - s.C - s.K;
  s.reverse = a.has("reverse") && a.boolean("reverse");
  s.has_index = a.has("index");
  if (s.has_index) s.index0 = a.integer("index");
  // The counter runs index .. index + length - 1, which must not pass the largest i64.
  if (s.has_index && s.length > 0 && s.index0 > std::numeric_limits<int64_t>::max() - (s.length - 1))
    throw Error(fmt::format("scan: the counter from index={} over length={} passes the largest i64 (expected index + "
                            "length - 1 <= {})",
                            s.index0, s.length, std::numeric_limits<int64_t>::max()));
  if (s.body->outputs.size() < s.K || s.body->outputs.empty())
    throw Error(fmt::format("scan: expected a body with at least {} output{} ({} carries), got {}",
                            std::max<std::size_t>(s.K, 1), std::max<std::size_t>(s.K, 1) == 1 ? "" : "s", s.K,
                            s.body->outputs.size()));
  s.Y = s.body->outputs.size() - s.K;
  read_policy(s, a);
  return s;
}

Results<VarType> scan_infer(std::span<const VarType> in, const Attrs& a) {
  const ScanLayout s = scan_layout(a, in.size());
  std::vector<VarType> want;
  if (s.has_index) want.push_back({DType::i64, {}});
  for (std::size_t i = 0; i < s.C + s.K; ++i) want.push_back(in[i]);
  for (std::size_t j = 0; j < s.X; ++j) {
    const VarType& x = in[s.C + s.K + j];
    if (x.shape.empty() || x.shape[0] != s.length)
      throw Error(fmt::format("scan: xs {} is {}, expected a leading axis of the length {}", j + 1, type_str(x),
                              s.length));
    want.push_back(without_leading(x));
  }
  const std::vector<VarType> got = s.body->input_types();
  if (got != want)
    throw Error(fmt::format("scan: expected a body taking {}{}{}, got one taking {}", types_str(want),
                            s.has_index ? " (the counter, " : " (", "consts, carries, slices of xs)", types_str(got)));
  std::vector<VarType> out;
  for (std::size_t i = 0; i < s.K; ++i) {
    const VarType& t = s.body->type(s.body->outputs[i]);
    if (t != in[s.C + i])
      throw Error(fmt::format("scan: carry {} enters the body as {} and leaves it as {}", i + 1,
                              type_str(in[s.C + i]), type_str(t)));
    out.push_back(t);
  }
  for (std::size_t j = 0; j < s.Y; ++j) out.push_back(with_leading(s.length, s.body->type(s.body->outputs[s.K + j])));
  return out;
}

Results<Tensor> scan_eager(std::span<const Tensor> in, const Attrs& a) {
  const ScanLayout s = scan_layout(a, in.size());
  std::vector<Tensor> carry(in.begin() + static_cast<std::ptrdiff_t>(s.C),
                            in.begin() + static_cast<std::ptrdiff_t>(s.C + s.K));
  std::vector<Tensor> ys;
  for (std::size_t j = 0; j < s.Y; ++j) {
    const VarType t = with_leading(s.length, s.body->type(s.body->outputs[s.K + j]));
    ys.emplace_back(t.dtype, t.shape);
  }
  std::vector<Tensor> args;
  for (int64_t i = 0; i < s.length; ++i) {
    const int64_t k = s.reverse ? s.length - 1 - i : i;
    args.clear();
    if (s.has_index) {
      Tensor counter(DType::i64, {});
      counter.mutable_data<int64_t>()[0] = s.index0 + k;
      args.push_back(std::move(counter));
    }
    args.insert(args.end(), in.begin(), in.begin() + static_cast<std::ptrdiff_t>(s.C));
    args.insert(args.end(), carry.begin(), carry.end());
    for (std::size_t j = 0; j < s.X; ++j) args.push_back(slice_at(in[s.C + s.K + j], k));
    std::vector<Tensor> outs;
    try {
      outs = evaluate(*s.body, args);
    } catch (const GuardFailure& e) {  // (a guard in the body, or a value it read: checked every iteration)
      throw GuardFailure(fmt::format("scan, iteration {}: {}", k, e.what()));
    }
    for (std::size_t c = 0; c < s.K; ++c) carry[c] = std::move(outs[c]);
    for (std::size_t j = 0; j < s.Y; ++j) store_at(ys[j], k, outs[s.K + j]);
  }
  carry.insert(carry.end(), ys.begin(), ys.end());
  return carry;
}

Attrs with_body(const Attrs& a, Tape body, std::size_t num_consts, std::size_t num_carry, bool flip = false) {
  Attrs out = a;
  out.set("body", TapeRef{std::make_shared<const Tape>(std::move(body))});
  out.set("num_consts", static_cast<int64_t>(num_consts));
  out.set("num_carry", static_cast<int64_t>(num_carry));
  if (flip) out.set("reverse", !(a.has("reverse") && a.boolean("reverse")));
  return out;
}

// reach[i][o]: output o of the body depends on its input i.
std::vector<std::vector<bool>> reach(const Tape& body) {
  const std::vector<Var> inputs = body.inputs();
  std::vector<std::vector<bool>> r(inputs.size(), std::vector<bool>(body.outputs.size(), false));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::vector<bool> dep(static_cast<std::size_t>(body.size()) + 1, false);
    dep[inputs[i]] = true;
    for (Var v = inputs[i] + 1; v <= body.size(); ++v)
      for (Var x : body.op(v).args) dep[v] = dep[v] || dep[x];
    for (std::size_t o = 0; o < body.outputs.size(); ++o) r[i][o] = dep[body.outputs[o]];
  }
  return r;
}

// Reverse mode of a scan: what both halves derive from the body.
struct ScanGrad {
  ScanLayout s;
  std::vector<bool> seeded;     // per body output: carries (their adjoint flows on) and ys
  std::vector<bool> wanted;     // per body input
  Tape forward;                 // the body, also giving the residuals
  Tape backward;                // the body's adjoint
  std::vector<Var> residuals;   // vjp variables stacked by the forward scan
  std::vector<Var> hoisted;     // loop-invariant vjp variables the backward reads
  Tape hoist;                   // consts -> hoisted
  std::vector<std::size_t> consts_read, xs_read;  // which consts and xs the backward reads
  std::size_t seeded_carries = 0, seeded_ys = 0, wanted_consts = 0, wanted_xs = 0;
};

std::shared_ptr<const ScanGrad> scan_grad(std::span<const Var> args, const TapeBuilder& b, const Attrs& a,
                                          std::span<const bool> needs, std::span<const bool> results_needed,
                                          const Transforms& tr) {
  auto g = std::make_shared<ScanGrad>();
  ScanLayout& s = g->s;
  s = scan_layout(a, args.size());
  const Tape& body = *s.body;
  const std::vector<Var> inputs = body.inputs();
  const auto r = reach(body);
  // Which carries' adjoints flow (a fixed point: a carry whose input reaches a seeded
  // output has an adjoint in the iteration before), which ys are seeded.
  g->seeded.assign(body.outputs.size(), false);
  for (std::size_t o = 0; o < body.outputs.size(); ++o)
    g->seeded[o] = results_needed[o] && is_float(body.type(body.outputs[o]).dtype);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t c = 0; c < s.K; ++c) {
      if (g->seeded[c] || !is_float(body.type(body.outputs[c]).dtype)) continue;
      for (std::size_t o = 0; o < body.outputs.size(); ++o)
        if (g->seeded[o] && r[s.first_carry() + c][o]) g->seeded[c] = changed = true;
    }
  }
  g->wanted.assign(inputs.size(), false);
  for (std::size_t i = 0; i < s.C; ++i) g->wanted[s.first_const() + i] = needs[i] && is_float(b.type(args[i]).dtype);
  for (std::size_t c = 0; c < s.K; ++c) g->wanted[s.first_carry() + c] = g->seeded[c];
  for (std::size_t j = 0; j < s.X; ++j)
    g->wanted[s.first_x() + j] = needs[s.C + s.K + j] && is_float(b.type(args[s.C + s.K + j]).dtype);
  for (std::size_t o = 0; o < body.outputs.size(); ++o) (o < s.K ? g->seeded_carries : g->seeded_ys) += g->seeded[o];
  for (std::size_t i = 0; i < s.C; ++i) g->wanted_consts += g->wanted[s.first_const() + i];
  for (std::size_t j = 0; j < s.X; ++j) g->wanted_xs += g->wanted[s.first_x() + j];

  auto seeded = std::make_unique<bool[]>(g->seeded.size());
  auto wanted = std::make_unique<bool[]>(g->wanted.size());
  std::copy(g->seeded.begin(), g->seeded.end(), seeded.get());
  std::copy(g->wanted.begin(), g->wanted.end(), wanted.get());
  const Tape V = tr.vjp(body, std::span<const bool>(seeded.get(), g->seeded.size()),
                        std::span<const bool>(wanted.get(), g->wanted.size()));

  // Each vjp variable: loop-invariant (consts and constants only), per iteration
  // (counter, carries, xs) or backward (reads a seed).
  enum Kind : char { inv, fwd, bwd };
  const Var n = V.size();
  std::vector<Kind> kind(static_cast<std::size_t>(n) + 1, inv);
  const std::vector<Var> vin = V.inputs();
  for (std::size_t i = 0; i < vin.size(); ++i)
    kind[vin[i]] = i >= inputs.size() ? bwd : (i >= s.first_const() && i < s.first_carry()) ? inv : fwd;
  for (Var v = 1; v <= n; ++v)
    for (Var x : V.op(v).args) kind[v] = std::max(kind[v], kind[x]);
  // The non-backward variables the backward part reads (or returns).
  std::vector<bool> read(static_cast<std::size_t>(n) + 1, false);
  for (Var v = 1; v <= n; ++v)
    if (kind[v] == bwd && V.op(v).kind != OpKind::input)
      for (Var x : V.op(v).args) read[x] = read[x] || kind[x] != bwd;
  const std::size_t nout = body.outputs.size();
  for (std::size_t o = nout; o < V.outputs.size(); ++o)
    if (kind[V.outputs[o]] != bwd) read[V.outputs[o]] = true;
  std::vector<int> input_pos(static_cast<std::size_t>(n) + 1, -1);
  for (std::size_t i = 0; i < vin.size(); ++i) input_pos[vin[i]] = static_cast<int>(i);
  for (Var v = 1; v <= n; ++v) {
    if (!read[v]) continue;
    const int p = input_pos[v];
    if (p >= 0 && static_cast<std::size_t>(p) >= s.first_const() && static_cast<std::size_t>(p) < s.first_carry())
      g->consts_read.push_back(static_cast<std::size_t>(p) - s.first_const());
    else if (p >= 0 && static_cast<std::size_t>(p) >= s.first_x() && static_cast<std::size_t>(p) < inputs.size())
      g->xs_read.push_back(static_cast<std::size_t>(p) - s.first_x());
    else if (p == 0 && s.has_index)
      continue;  // the backward scan counts too
    else if (kind[v] == inv && V.op(v).kind == OpKind::constant)
      continue;  // copied into the backward body, where code generation folds it
    else if (kind[v] == inv)
      g->hoisted.push_back(v);
    else
      g->residuals.push_back(v);
  }

  // The forward body: the body's inputs; its outputs, then the residuals.
  {
    TapeBuilder f;
    std::vector<Var> map(static_cast<std::size_t>(n) + 1, kNoVar);
    for (Var v = 1; v <= n; ++v)
      if (kind[v] != bwd) map[v] = f.copy(V.op(v), [&] {
        std::vector<Var> as;
        for (Var x : V.op(v).args) as.push_back(map[x]);
        return as;
      }());
    std::vector<Var> outs;
    for (std::size_t o = 0; o < nout; ++o) outs.push_back(map[V.outputs[o]]);
    for (Var v : g->residuals) outs.push_back(map[v]);
    f.set_outputs(std::move(outs));
    g->forward = tr.cleanup(f.finish());
  }
  // consts -> the hoisted loop invariants.
  {
    TapeBuilder h;
    std::vector<Var> map(static_cast<std::size_t>(n) + 1, kNoVar);
    for (Var v = 1; v <= n; ++v) {
      const int p = input_pos[v];
      if (p >= 0 && kind[v] == inv) map[v] = h.input(V.type(v));
      else if (kind[v] == inv && p < 0) {
        std::vector<Var> as;
        for (Var x : V.op(v).args) as.push_back(map[x]);
        map[v] = h.copy(V.op(v), std::move(as));
      }
    }
    std::vector<Var> outs;
    for (Var v : g->hoisted) outs.push_back(map[v]);
    h.set_outputs(std::move(outs));
    g->hoist = h.finish();  // (not cleaned: its inputs are the consts, in order)
  }
  // The backward body: [counter], consts read, hoisted; carry adjoints, const
  // accumulators; residuals, xs read, ys' adjoints -> carry adjoints, accumulators; xs'
  // adjoints.
  {
    TapeBuilder k;
    std::vector<Var> map(static_cast<std::size_t>(n) + 1, kNoVar);
    if (s.has_index) map[vin[0]] = k.input({DType::i64, {}});
    for (std::size_t c : g->consts_read) map[vin[s.first_const() + c]] = k.input(V.type(vin[s.first_const() + c]));
    for (Var v : g->hoisted) map[v] = k.input(V.type(v));
    for (Var v = 1; v <= n; ++v)
      if (read[v] && kind[v] == inv && V.op(v).kind == OpKind::constant) map[v] = k.constant(V.op(v).value);
    // Seeds: V's inputs after the body's, one per seeded output in order.
    std::vector<Var> seed_of(nout, kNoVar);
    for (std::size_t o = 0, i = inputs.size(); o < nout; ++o)
      if (g->seeded[o]) seed_of[o] = vin[i++];
    for (std::size_t c = 0; c < s.K; ++c)
      if (g->seeded[c]) map[seed_of[c]] = k.input(V.type(seed_of[c]));
    std::vector<Var> acc;
    for (std::size_t i = 0; i < s.C; ++i)
      if (g->wanted[s.first_const() + i]) acc.push_back(k.input(V.type(vin[s.first_const() + i])));
    for (Var v : g->residuals) map[v] = k.input(V.type(v));
    for (std::size_t j : g->xs_read) map[vin[s.first_x() + j]] = k.input(V.type(vin[s.first_x() + j]));
    for (std::size_t o = s.K; o < nout; ++o)
      if (g->seeded[o]) map[seed_of[o]] = k.input(V.type(seed_of[o]));
    for (Var v = 1; v <= n; ++v)
      if (kind[v] == bwd && V.op(v).kind != OpKind::input) {
        std::vector<Var> as;
        for (Var x : V.op(v).args) as.push_back(map[x]);
        map[v] = k.copy(V.op(v), std::move(as));
      }
    // V's gradient outputs, in input order: wanted consts, carries, xs.
    std::vector<Var> grad_of(inputs.size(), kNoVar);
    for (std::size_t i = 0, o = nout; i < inputs.size(); ++i)
      if (g->wanted[i]) grad_of[i] = map[V.outputs[o++]];
    std::vector<Var> outs;
    for (std::size_t c = 0; c < s.K; ++c)
      if (g->seeded[c]) outs.push_back(grad_of[s.first_carry() + c]);
    for (std::size_t i = 0, q = 0; i < s.C; ++i)
      if (g->wanted[s.first_const() + i]) outs.push_back(k.add(acc[q++], grad_of[s.first_const() + i]));
    for (std::size_t j = 0; j < s.X; ++j)
      if (g->wanted[s.first_x() + j]) outs.push_back(grad_of[s.first_x() + j]);
    k.set_outputs(std::move(outs));
    g->backward = tr.cleanup(k.finish());
  }
  return g;
}

// ---- Checkpoint policies ----

Attrs scan_attrs(std::shared_ptr<const Tape> body, int64_t length, std::size_t C, std::size_t K, bool reverse,
                 std::optional<int64_t> index) {
  Attrs a{{"body", TapeRef{std::move(body)}},
          {"length", length},
          {"num_consts", static_cast<int64_t>(C)},
          {"num_carry", static_cast<int64_t>(K)}};
  if (reverse) a.set("reverse", true);
  if (index) a.set("index", *index);
  return a;
}

Var cast_to(TapeBuilder& b, Var x, DType dtype) { return b.call("cast", {x}, {{"dtype", dtype}}); }

// Checkpointing every k iterations, as jax.checkpoint of a scan of scans: the scan as
// an outer scan over the S = N / k segments whose body is a `checkpoint` of an inner
// scan of k iterations, and a scan of the N mod k iterations left (after the segments,
// or before them when reverse). Differentiated, the outer scan stores only the carries
// entering each segment; the checkpoint's adjoint recomputes its segment (storing that
// segment's residuals) and runs its adjoint. With a counter, the inner body counts
// index + s k + j from the segment's s and its own j (exact in f64 below 2^53).
Tape segmented(const ScanLayout& s, const std::vector<VarType>& types, const Attrs& attrs) {
  const int64_t N = s.length, k = std::min(s.segment, N), S = N / k, R = N % k;
  const std::shared_ptr<const Tape> body = std::get<TapeRef>(attrs.get("body")).tape;
  const VarType counter{DType::i64, {}};
  const std::optional<int64_t> count_from_0 = s.has_index ? std::optional<int64_t>(0) : std::nullopt;
  auto segment_type = [&](std::size_t j) { return with_leading(k, without_leading(types[s.C + s.K + j])); };
  // The inner body: [j, base,] consts, carries, slices.
  std::shared_ptr<const Tape> inner = body;
  if (s.has_index) {
    TapeBuilder ib;
    const Var j = ib.input(counter), base = ib.input(counter);
    const std::vector<VarType> body_types = body->input_types();
    std::vector<Var> in{kNoVar};  // (the body's counter, below)
    for (std::size_t i = 1; i < body_types.size(); ++i) in.push_back(ib.input(body_types[i]));
    in[0] = cast_to(ib, ib.add(cast_to(ib, j, DType::f64), cast_to(ib, base, DType::f64)), DType::i64);
    ib.set_outputs(ib.inline_tape(*body, in));
    inner = std::make_shared<const Tape>(ib.finish());
  }
  // The checkpoint's body: [base,] consts, carries, segments of xs -> the inner scan's results.
  TapeBuilder cb;
  std::vector<Var> cin;
  if (s.has_index) cin.push_back(cb.input(counter));
  for (std::size_t i = 0; i < s.C + s.K; ++i) cin.push_back(cb.input(types[i]));
  for (std::size_t j = 0; j < s.X; ++j) cin.push_back(cb.input(segment_type(j)));
  cb.set_outputs(cb.call_results(primitive("scan"), cin,
                                 scan_attrs(inner, k, s.C + (s.has_index ? 1 : 0), s.K, s.reverse, count_from_0)));
  const Tape checkpointed = cb.finish();
  // The outer body: [segment,] consts, carries, segments of xs -> checkpoint(...).
  TapeBuilder ob;
  const Var segment = s.has_index ? ob.input(counter) : kNoVar;
  std::vector<Var> oin;
  for (std::size_t i = 0; i < s.C + s.K; ++i) oin.push_back(ob.input(types[i]));
  for (std::size_t j = 0; j < s.X; ++j) oin.push_back(ob.input(segment_type(j)));
  if (s.has_index) {
    const Var first = ob.add(ob.mul(cast_to(ob, segment, DType::f64), static_cast<double>(k)),
                             ob.scalar(static_cast<double>(s.index0), DType::f64));
    oin.insert(oin.begin(), cast_to(ob, first, DType::i64));
  }
  ob.set_outputs(call_tape(ob, "checkpoint", checkpointed, oin));
  const auto outer = std::make_shared<const Tape>(ob.finish());

  TapeBuilder e;
  std::vector<Var> in;
  for (const VarType& t : types) in.push_back(e.input(t));
  const std::vector<Var> consts(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(s.C));
  auto xs_from = [&](int64_t start, int64_t stop) {
    std::vector<Var> xs;
    for (std::size_t j = 0; j < s.X; ++j) {
      const Var x = in[s.C + s.K + j];
      xs.push_back(start == 0 && stop == N
                       ? x
                       : e.call("slice", {x}, {{"axis", int64_t{0}}, {"start", start}, {"stop", stop}}));
    }
    return xs;
  };
  auto run = [&](std::vector<Var> carry, std::vector<Var> xs, Attrs a) {
    std::vector<Var> args = consts;
    args.insert(args.end(), carry.begin(), carry.end());
    args.insert(args.end(), xs.begin(), xs.end());
    return e.call_results(primitive("scan"), std::move(args), std::move(a));
  };
  auto segments = [&](std::vector<Var> carry) {
    std::vector<Var> xs = xs_from(0, S * k);
    for (std::size_t j = 0; j < s.X; ++j) {
      Shape shape = e.type(xs[j]).shape;
      shape[0] = k;
      shape.insert(shape.begin(), S);
      xs[j] = e.reshape(xs[j], shape);
    }
    std::vector<Var> r = run(std::move(carry), std::move(xs), scan_attrs(outer, S, s.C, s.K, s.reverse, count_from_0));
    for (std::size_t j = 0; j < s.Y; ++j) {
      Shape shape = e.type(r[s.K + j]).shape;
      shape.erase(shape.begin());
      shape[0] = S * k;
      r[s.K + j] = e.reshape(r[s.K + j], shape);
    }
    return r;
  };
  auto rest = [&](std::vector<Var> carry) {
    return run(std::move(carry), xs_from(S * k, N),
               scan_attrs(body, R, s.C, s.K, s.reverse,
                          s.has_index ? std::optional<int64_t>(s.index0 + S * k) : std::nullopt));
  };
  auto carries_of = [&](const std::vector<Var>& r) {
    return std::vector<Var>(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(s.K));
  };
  std::vector<Var> first(in.begin() + static_cast<std::ptrdiff_t>(s.C),
                         in.begin() + static_cast<std::ptrdiff_t>(s.C + s.K));
  std::vector<Var> main, left;
  if (!s.reverse) {
    main = segments(first);
    if (R > 0) left = rest(carries_of(main));
  } else {
    if (R > 0) left = rest(first);
    main = segments(R > 0 ? carries_of(left) : first);
  }
  std::vector<Var> outs = carries_of(!s.reverse && R > 0 ? left : main);
  for (std::size_t j = 0; j < s.Y; ++j)
    outs.push_back(R > 0 ? e.call("concat", {main[s.K + j], left[s.K + j]}, {{"axis", int64_t{0}}}) : main[s.K + j]);
  e.set_outputs(std::move(outs));
  return e.finish();
}

// Reverse mode of a tape E (equal to a call) in two halves, by splitting its vjp: the
// forward half is what reads no seed (E's results, and the residuals: the values the
// rest reads), the backward half the rest.
struct SplitVjp {
  Tape V;
  std::size_t nin = 0, nout = 0;
  std::vector<bool> seeded, wanted;
  std::vector<bool> backward;  // per variable of V: reads a seed
  std::vector<Var> residuals;  // forward variables the backward half reads (not constants: copied)
};

std::shared_ptr<const SplitVjp> split_vjp(const Tape& E, std::vector<bool> seeded, std::vector<bool> wanted,
                                          const Transforms& tr) {
  auto sp = std::make_shared<SplitVjp>();
  sp->nin = wanted.size(), sp->nout = seeded.size();
  auto sd = std::make_unique<bool[]>(sp->nout);
  auto wt = std::make_unique<bool[]>(sp->nin);
  std::copy(seeded.begin(), seeded.end(), sd.get());
  std::copy(wanted.begin(), wanted.end(), wt.get());
  sp->V = tr.vjp(E, std::span<const bool>(sd.get(), sp->nout), std::span<const bool>(wt.get(), sp->nin));
  sp->seeded = std::move(seeded), sp->wanted = std::move(wanted);
  const Tape& V = sp->V;
  const Var n = V.size();
  std::vector<bool>& bwd = sp->backward;
  bwd.assign(static_cast<std::size_t>(n) + 1, false);
  const std::vector<Var> vin = V.inputs();
  for (std::size_t i = sp->nin; i < vin.size(); ++i) bwd[vin[i]] = true;
  for (Var v = 1; v <= n; ++v)
    for (Var x : V.op(v).args) bwd[v] = bwd[v] || bwd[x];
  std::vector<bool> read(static_cast<std::size_t>(n) + 1, false);
  for (Var v = 1; v <= n; ++v)
    if (bwd[v])
      for (Var x : V.op(v).args) read[x] = read[x] || !bwd[x];
  for (std::size_t o = sp->nout; o < V.outputs.size(); ++o) read[V.outputs[o]] = read[V.outputs[o]] || !bwd[V.outputs[o]];
  for (Var v = 1; v <= n; ++v)
    if (read[v] && V.op(v).kind != OpKind::constant) sp->residuals.push_back(v);
  return sp;
}

ForwardHalf emit_forward(TapeBuilder& b, const SplitVjp& sp, std::span<const Var> args) {
  const Tape& V = sp.V;
  std::vector<Var> map(static_cast<std::size_t>(V.size()) + 1, kNoVar);
  const std::vector<Var> vin = V.inputs();
  for (std::size_t i = 0; i < sp.nin; ++i) map[vin[i]] = args[i];
  for (Var v = 1; v <= V.size(); ++v) {
    const Op& op = V.op(v);
    if (sp.backward[v] || op.kind == OpKind::input) continue;
    std::vector<Var> as;
    for (Var x : op.args) as.push_back(map[x]);
    map[v] = op.kind == OpKind::constant ? b.constant(op.value) : b.copy(op, std::move(as));
  }
  ForwardHalf half;
  for (std::size_t o = 0; o < sp.nout; ++o) half.results.push_back(map[V.outputs[o]]);
  for (Var r : sp.residuals) half.residuals.push_back(map[r]);
  return half;
}

std::vector<Var> emit_backward(TapeBuilder& b, const SplitVjp& sp, std::span<const Var> residuals,
                               std::span<const Var> douts) {
  const Tape& V = sp.V;
  std::vector<Var> map(static_cast<std::size_t>(V.size()) + 1, kNoVar);
  for (std::size_t i = 0; i < sp.residuals.size(); ++i) map[sp.residuals[i]] = residuals[i];
  const std::vector<Var> vin = V.inputs();
  for (std::size_t o = 0, i = sp.nin; o < sp.nout; ++o)
    if (sp.seeded[o]) map[vin[i]] = b.or_zeros(douts[o], V.type(vin[i])), ++i;
  auto get = [&](Var x) {
    if (map[x] == kNoVar && V.op(x).kind == OpKind::constant) map[x] = b.constant(V.op(x).value);
    return map[x];
  };
  for (Var v = 1; v <= V.size(); ++v) {
    const Op& op = V.op(v);
    if (!sp.backward[v] || op.kind == OpKind::input) continue;
    std::vector<Var> as;
    for (Var x : op.args) as.push_back(get(x));
    map[v] = b.copy(op, std::move(as));
  }
  std::vector<Var> grads(sp.nin, kNoVar);
  for (std::size_t i = 0, o = sp.nout; i < sp.nin; ++i)
    if (sp.wanted[i]) grads[i] = get(V.outputs[o++]);
  return grads;
}

// What a scan's forward half hands its adjoint: the store-all derivation (store, and
// binomial, whose driver recomputes the residuals), or the split vjp of the segmented
// scan (every, sqrt).
struct ScanHalf {
  std::shared_ptr<const ScanGrad> grad;
  std::shared_ptr<const SplitVjp> split;
};

bool revolving(const ScanLayout& s) { return s.policy == ScanLayout::Policy::binomial && s.length > 1; }

ForwardHalf scan_forward(TapeBuilder& b, const ForwardArgs& a) {
  const ScanLayout s = scan_layout(a.attrs, a.args.size());
  auto state = std::make_shared<ScanHalf>();
  ForwardHalf half;
  if (s.policy == ScanLayout::Policy::every && s.length > 0) {
    std::vector<bool> seeded, wanted;
    std::vector<VarType> types;
    for (std::size_t o = 0; o < s.K + s.Y; ++o)
      seeded.push_back(a.results_needed[o] && is_float(s.body->type(s.body->outputs[o]).dtype));
    for (std::size_t i = 0; i < a.args.size(); ++i) {
      types.push_back(b.type(a.args[i]));
      wanted.push_back(a.needs[i] && is_float(types.back().dtype));
    }
    state->split = split_vjp(segmented(s, types, a.attrs), std::move(seeded), std::move(wanted), *a.transforms);
    half = emit_forward(b, *state->split, a.args);
  } else {
    state->grad = scan_grad(a.args, b, a.attrs, a.needs, a.results_needed, *a.transforms);
    // binomial: the plain scan, its residuals recomputed by the backward half's driver.
    const std::vector<Var> outs =
        b.call_results(primitive("scan"), std::vector<Var>(a.args.begin(), a.args.end()),
                       revolving(s) ? a.attrs : with_body(a.attrs, state->grad->forward, s.C, s.K));
    half.results.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(s.K + s.Y));
    half.residuals.assign(outs.begin() + static_cast<std::ptrdiff_t>(s.K + s.Y), outs.end());
  }
  half.state = state;
  return half;
}

// The backward half under binomial checkpointing: the revolve driver (prims_revolve.cpp)
// in place of the backward scan, recomputing the residuals from the scan's arguments.
std::vector<Var> revolve_call(TapeBuilder& b, const AdjointArgs& a, const ScanGrad& g,
                              const std::vector<Var>& backward_args, std::size_t nconsts, std::size_t ncarry) {
  if (!a.residuals.empty())
    throw Error("grad: scan's binomial adjoint expects a forward half without residuals (internal error)");
  const ScanLayout& s = g.s;
  // The scan's arguments, then the backward scan's without the residuals (the forward
  // half gave none).
  std::vector<Var> args(a.args.begin(), a.args.end());
  args.insert(args.end(), backward_args.begin(), backward_args.end());
  std::vector<int> carries;
  for (std::size_t c = 0; c < s.K; ++c) carries.push_back(static_cast<int>(c));
  auto tape = [](Tape t) { return TapeRef{std::make_shared<const Tape>(std::move(t))}; };
  Attrs attrs{{"forward", tape(g.forward)},
              {"advance", tape(a.transforms->cleanup(select_outputs(g.forward, carries)))},
              {"backward", tape(g.backward)},
              {"length", s.length},
              {"num_consts", static_cast<int64_t>(s.C)},
              {"num_carry", static_cast<int64_t>(s.K)},
              {"num_ys", static_cast<int64_t>(s.Y)},
              {"num_bwd_consts", static_cast<int64_t>(nconsts)},
              {"num_bwd_carry", static_cast<int64_t>(ncarry)},
              {"snapshots", s.snapshots}};
  if (s.reverse) attrs.set("reverse", true);
  if (s.has_index) attrs.set("index", s.index0);
  return b.call_results(primitive("revolve"), std::move(args), std::move(attrs));
}

std::vector<Var> scan_adjoint(TapeBuilder& b, const AdjointArgs& a) {
  if (!a.state)
    throw Error("grad: scan's adjoint needs its forward half (reverse_mode runs it; call the adjoint through it)");
  const auto& state = *std::static_pointer_cast<const ScanHalf>(a.state);
  std::vector<Var> grads;
  if (state.split) {
    grads = emit_backward(b, *state.split, a.residuals, a.douts);
    for (std::size_t i = 0; i < a.args.size(); ++i)
      if (!a.needs[i]) grads[i] = kNoVar;
    return grads;
  }
  const ScanGrad& g = *state.grad;
  const ScanLayout& s = g.s;
  grads.assign(a.args.size(), kNoVar);
  const std::size_t K2 = g.seeded_carries + g.wanted_consts;
  if (K2 + g.wanted_xs == 0) return grads;
  const std::vector<Var> consts(a.args.begin(), a.args.begin() + static_cast<std::ptrdiff_t>(s.C));
  const std::vector<Var> hoisted = b.inline_tape(g.hoist, consts);
  std::vector<Var> args;
  for (std::size_t c : g.consts_read) args.push_back(a.args[c]);
  args.insert(args.end(), hoisted.begin(), hoisted.end());
  const std::size_t nconsts = args.size();
  const Tape& body = *s.body;
  for (std::size_t c = 0; c < s.K; ++c)
    if (g.seeded[c]) args.push_back(b.or_zeros(a.douts[c], body.type(body.outputs[c])));
  for (std::size_t i = 0; i < s.C; ++i)
    if (g.wanted[s.first_const() + i]) args.push_back(zeros_of(b, b.type(a.args[i])));
  args.insert(args.end(), a.residuals.begin(), a.residuals.end());
  for (std::size_t j : g.xs_read) args.push_back(a.args[s.C + s.K + j]);
  for (std::size_t o = s.K; o < body.outputs.size(); ++o)
    if (g.seeded[o]) args.push_back(b.or_zeros(a.douts[o], with_leading(s.length, body.type(body.outputs[o]))));
  const std::vector<Var> outs =
      revolving(s) ? revolve_call(b, a, g, args, nconsts, K2)
                   : b.call_results(primitive("scan"), std::move(args), with_body(a.attrs, g.backward, nconsts, K2, true));
  std::size_t q = 0;
  for (std::size_t c = 0; c < s.K; ++c)
    if (g.seeded[c]) grads[s.C + c] = outs[q++];
  for (std::size_t i = 0; i < s.C; ++i)
    if (g.wanted[s.first_const() + i]) grads[i] = outs[q++];
  for (std::size_t j = 0; j < s.X; ++j)
    if (g.wanted[s.first_x() + j]) grads[s.C + s.K + j] = outs[q++];
  for (std::size_t i = 0; i < a.args.size(); ++i)
    if (!a.needs[i]) grads[i] = kNoVar;
  return grads;
}

// Forward mode: one scan over the body's jvp, the tangents of the active consts,
// carries and xs riding along as consts, carries and xs of their own.
Results<Var> scan_tangent(TapeBuilder& b, const TangentArgs& a) {
  const ScanLayout s = scan_layout(a.attrs, a.args.size());
  const Tape& body = *s.body;
  const std::vector<Var> inputs = body.inputs();
  const auto r = reach(body);
  std::vector<bool> active(inputs.size(), false);
  for (std::size_t i = 0; i < s.C + s.K + s.X; ++i)
    active[s.first_const() + i] = a.tangents[i] != kNoVar && is_float(b.type(a.args[i]).dtype);
  for (bool changed = true; changed;) {  // a carry is active if its new value depends on an active input
    changed = false;
    for (std::size_t c = 0; c < s.K; ++c) {
      if (active[s.first_carry() + c] || !is_float(b.type(a.args[s.C + c]).dtype)) continue;
      for (std::size_t i = 0; i < inputs.size(); ++i)
        if (active[i] && r[i][c]) active[s.first_carry() + c] = changed = true;
    }
  }
  auto act = std::make_unique<bool[]>(active.size());
  std::copy(active.begin(), active.end(), act.get());
  const Tape J = a.transforms->jvp(body, std::span<const bool>(act.get(), active.size()));
  // The new body's inputs: [counter], consts, their tangents, carries, theirs, xs, theirs.
  TapeBuilder k;
  std::vector<Var> jin(J.inputs().size(), kNoVar);  // J's inputs: the body's, then tangents of the active
  std::vector<std::size_t> tangent_pos(inputs.size(), 0);
  for (std::size_t i = 0, t = inputs.size(); i < inputs.size(); ++i)
    if (active[i]) tangent_pos[i] = t++;
  std::vector<Var> args;
  auto group = [&](std::size_t from, std::size_t count, std::size_t arg0, bool zeros_for_missing) {
    for (std::size_t i = from; i < from + count; ++i) {
      jin[i] = k.input(J.type(J.inputs()[i]));
      args.push_back(a.args[arg0 + i - from]);
    }
    for (std::size_t i = from; i < from + count; ++i)
      if (active[i]) {
        jin[tangent_pos[i]] = k.input(J.type(J.inputs()[tangent_pos[i]]));
        const Var t = a.tangents[arg0 + i - from];
        args.push_back(zeros_for_missing ? b.or_zeros(t, b.type(a.args[arg0 + i - from])) : t);
      }
  };
  if (s.has_index) jin[0] = k.input({DType::i64, {}});
  std::size_t nactive_c = 0, nactive_k = 0;
  for (std::size_t i = 0; i < s.C; ++i) nactive_c += active[s.first_const() + i];
  for (std::size_t c = 0; c < s.K; ++c) nactive_k += active[s.first_carry() + c];
  group(s.first_const(), s.C, 0, false);
  group(s.first_carry(), s.K, s.C, true);
  group(s.first_x(), s.X, s.C + s.K, false);
  const std::vector<Var> jout = k.inline_tape(J, jin);
  const std::size_t nout = body.outputs.size();
  std::vector<Var> outs(jout.begin(), jout.begin() + static_cast<std::ptrdiff_t>(s.K));
  for (std::size_t c = 0; c < s.K; ++c)
    if (active[s.first_carry() + c]) outs.push_back(jout[nout + c]);
  for (std::size_t y = s.K; y < nout; ++y) outs.push_back(jout[y]);
  for (std::size_t y = s.K; y < nout; ++y) outs.push_back(jout[nout + y]);
  k.set_outputs(std::move(outs));
  const std::vector<Var> res = b.call_results(primitive("scan"), std::move(args),
                                              with_body(a.attrs, a.transforms->cleanup(k.finish()), s.C + nactive_c,
                                                        s.K + nactive_k));
  std::vector<Var> tangents(nout, kNoVar);
  for (std::size_t c = 0, q = s.K; c < s.K; ++c) {
    a.same_outs[c] = res[c];
    if (active[s.first_carry() + c]) tangents[c] = res[q++];
  }
  for (std::size_t y = 0; y < s.Y; ++y) {
    a.same_outs[s.K + y] = res[s.K + nactive_k + y];
    tangents[s.K + y] = res[s.K + nactive_k + s.Y + y];
  }
  return tangents;
}

// Batching: one scan over the batched body. Its batched consts and xs carry the batch
// (xs behind the length axis: [length, size, ...], so that each iteration's slice has it
// in front); a carry is batched if it starts batched or its next value depends on a
// batched input (a fixed point: it then starts batched, broadcast); a y is batched if it
// depends on one. The rest stays unbatched inside the loop and is broadcast after it.
Results<Var> scan_batch(TapeBuilder& b, const BatchArgs& a) {
  const ScanLayout s = scan_layout(a.attrs, a.args.size());
  const Tape& body = *s.body;
  std::vector<bool> in(body.inputs().size(), false);
  for (std::size_t i = 0; i < s.C + s.K + s.X; ++i) in[s.first_const() + i] = a.batched[i];
  const std::vector<bool> out = batch_carries(body, in, s.first_carry(), s.K);
  std::vector<Var> args(a.args.begin(), a.args.end());
  for (std::size_t c = 0; c < s.K; ++c)
    if (in[s.first_carry() + c]) args[s.C + c] = ensure_batched(b, args[s.C + c], a.batched[s.C + c], a.size);
  for (std::size_t j = 0; j < s.X; ++j)
    if (a.batched[s.C + s.K + j]) args[s.C + s.K + j] = move_axes(b, args[s.C + s.K + j], 0, 1, 1);
  std::vector<Var> res = b.call_results(
      primitive("scan"), std::move(args),
      with_body(a.attrs, batch_loop_body(body, in, out, a.size, *a.transforms), s.C, s.K));
  for (std::size_t c = 0; c < s.K; ++c) res[c] = ensure_batched(b, res[c], out[c], a.size);
  for (std::size_t j = 0; j < s.Y; ++j)
    res[s.K + j] = out[s.K + j] ? move_axes(b, res[s.K + j], 1, 1, 0) : ensure_batched(b, res[s.K + j], false, a.size);
  return res;
}

Primitive scan_p() {
  return {
      .name = "scan",
      .arity = kVariadic,
      .attrs = {{"body", AttrKind::tape},
                {"length", AttrKind::integer},
                {"num_consts", AttrKind::integer},
                {"num_carry", AttrKind::integer},
                {"reverse", AttrKind::boolean, true},
                {"index", AttrKind::integer, true},
                {"checkpoint", AttrKind::string, true},
                {"checkpoint_arg", AttrKind::integer, true}},
      .infer = scan_infer,
      .eager = scan_eager,
      .adjoint = scan_adjoint,
      .any_dtype = true,
      .results = kVariadic,
      .tangent = scan_tangent,
      .structure = Structure::loop,
      .adjoint_forward = scan_forward,
      .batch = scan_batch,
  };
}

}  // namespace

void add_loops(std::vector<Primitive>& t) {
  t.insert(t.end(), {scan_p()});
  add_revolve(t);
}

}  // namespace reel::prims

namespace reel {

Results<Var> batch_by_scan(TapeBuilder& b, const Primitive& p, const BatchArgs& a) {
  TapeBuilder body;
  std::vector<Var> consts, xs, inner(a.args.size(), kNoVar);
  for (std::size_t i = 0; i < a.args.size(); ++i)
    if (!a.batched[i]) consts.push_back(a.args[i]), inner[i] = body.input(a.types[i]);
  for (std::size_t i = 0; i < a.args.size(); ++i)
    if (a.batched[i]) xs.push_back(a.args[i]), inner[i] = body.input(a.types[i]);
  body.set_outputs(body.call_results(p, inner, a.attrs));
  std::vector<Var> args = consts;
  args.insert(args.end(), xs.begin(), xs.end());
  Attrs attrs{{"body", TapeRef{std::make_shared<const Tape>(body.finish())}},
              {"length", a.size},
              {"num_consts", static_cast<int64_t>(consts.size())},
              {"num_carry", int64_t{0}}};
  return b.call_results(primitive("scan"), std::move(args), std::move(attrs));
}

}  // namespace reel
