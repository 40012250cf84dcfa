// vectorize: a scan whose iterations carry nothing from one to the next but reductions
// becomes batched operations over its iterations, then the reductions.
//
// A carry is a reduction when the body's next value of it is add, mul, maximum or
// minimum of the carry and a value that depends on no carry but fresh ones (or the
// carry minus such a value), and nothing else in the body reads the carry or that
// result. Two other carries go along: one the body passes through unchanged (its final
// value is its initial one), and a fresh one, whose next value depends on no carry (a
// loop the re-rolling pass folded a step out of phase: `s = s + e; e = exp(x[i])`, or
// `z = x_next * y[i]; x_next = x[i + 1]`). A fresh carry's value in iteration i is its
// initial value for i = 0 and its next value of iteration i - 1 after: when more than a
// reduction reads it, it is shifted, its next values batched first and then stacked
// behind its initial value as one more input of the batched body. When every carry is
// one of these, and no y depends on a carry but fresh ones, the iterations are
// independent: the body without its reductions is batched over the xs (vmap), and each
// reduction becomes the reduce primitive of its operation (sum, prod, max, min) over
// the iteration axis, combined with the carry's initial value. The ys are the batched
// body's outputs, already stacked. A scan's body is vectorized before the scan is
// batched, so that loops inside it become batched operations, not scans over batches.
//
// A sum is then added in another order than the loop's (a few ulps apart; a sum of
// only -0 terms onto -0 gives +0), and at ties or NaNs of a max or min the gradient is
// the reduce's (split among the tied elements) rather than the chain of maximum's: both
// are valid, but they differ. Left as they are: scans that run backwards, read their
// counter, or keep fewer residuals than all (a checkpoint policy: the batched form
// would store every iteration's); scans of fewer than two iterations; f32 sums and
// products (the loop rounds at every step); bodies holding a guard (whose error names
// the iteration), a primitive that is not pure, or a while_loop; and loops whose
// batched values would exceed 2^27 elements (they keep one iteration's at a time).
// The bodies of the scans left are vectorized too (a loop of reductions inside a
// recurrence).
#include <algorithm>
#include <optional>
#include <utility>

#include "reel/ir/builder.hpp"
#include "reel/ir/loop_params.hpp"
#include "reel/ir/prims.hpp"
#include "reel/passes.hpp"
#include "rewrite.hpp"
#include "vectorize.hpp"

namespace reel {

namespace {

// A reduction of a carry: the reduce primitive over the iteration axis (all), the
// operation joining two partial results (pair) and the one applying the total to the
// carry (apply): c - t1 - t2 is c - (t1 + t2).
struct Reduce {
  const Primitive* all = nullptr;
  const Primitive* pair = nullptr;
  const Primitive* apply = nullptr;
};

// The reduction whose step is `p` (an associative, commutative operation, or a
// subtraction from the carry), or none.
Reduce reduce_of(const Primitive* p) {
  if (p == &prims::add()) return {&prims::sum(), p, p};
  if (p == &prims::sub()) return {&prims::sum(), &prims::add(), p};
  if (p == &prims::mul()) return {&prims::prod(), p, p};
  if (p == &prims::maximum()) return {&prims::max(), p, p};
  if (p == &prims::minimum()) return {&prims::min(), p, p};
  return {};
}

// How a carry leaves one iteration:
// - passed: unchanged (nothing in the body reads it);
// - fresh: a value that depends on no carry (a loop re-rolled a step out of phase,
//   `s = s + e; e = f(x[i])`): the next iteration's reduction reads it, or anything
//   does, the carry then being shifted (Split::shifted);
// - reduced: op(carry, term) or op(term, carry), the term depending on no carry or
//   being a fresh carry.
struct Carry {
  enum Kind { passed, fresh, reduced } kind = passed;
  const Primitive* op = nullptr;  // reduced
  Var term = kNoVar;              // reduced: in the body
  int fresh_term = -1;            // reduced: the fresh carry that is its term, or -1
  bool carry_first = true;
};

// A body whose carries are all passed, fresh or reduced: how each is, and the body
// without them (its inputs the consts, the xs, then each shifted carry; its outputs
// each reduced carry's term that is not a fresh carry, each fresh carry's next value,
// then the ys). A fresh carry's next values are batched twice, on their own (to stack
// the shifted carries) and in the whole body; cse merges the two.
struct Split {
  std::vector<Carry> carries;
  std::vector<bool> shifted;  // per carry: a fresh carry read by more than a reduction
  Tape independent;
};

// Whether the body may run once for all iterations: no guard (whose error names the
// iteration that fails it), no primitive that is not pure (it would run once instead of
// once per iteration), no while_loop (whose recorded trip count a batch drops), in it
// or in the loops it holds.
bool batchable(const Tape& body) {
  for (const Op& op : body.ops) {
    if (op.kind != OpKind::call) continue;
    if (op.prim->effect || !op.prim->pure || loop_form(*op.prim) == LoopForm::while_loop) return false;
    for (const auto& [name, value] : op.attrs.items())
      if (const auto* sub = std::get_if<TapeRef>(&value); sub != nullptr && sub->tape && !batchable(*sub->tape))
        return false;
  }
  return true;
}

// The elements the batched body would hold at once: its values times the iterations.
int64_t batched_elements(const Tape& body, int64_t length) {
  int64_t per_iteration = 0;
  for (const Op& op : body.ops) per_iteration += numel(op.type.shape);
  return per_iteration * length;
}

// At most this many elements held by a vectorized loop (1 GiB of f64): a longer loop
// over large values stays a scan, which holds one iteration's.
constexpr int64_t kMaxBatchedElements = int64_t{1} << 27;

std::optional<Split> split(const Tape& body, const ScanParams& p) {
  if (!batchable(body) || batched_elements(body, p.length) > kMaxBatchedElements) return std::nullopt;
  const std::vector<Var> in = body.inputs();
  const auto n = static_cast<std::size_t>(body.size()) + 1;
  auto at = [](Var v) { return static_cast<std::size_t>(v); };
  std::vector<int> reads(n, 0), as_output(n, 0), carry_of(n, -1);
  std::vector<bool> carried(n, false);  // depends on a carry
  for (std::size_t k = 0; k < p.K; ++k) {
    carried[at(in[p.first_carry() + k])] = true;
    carry_of[at(in[p.first_carry() + k])] = static_cast<int>(k);
  }
  for (Var v = 1; v <= body.size(); ++v) {
    for (Var a : body.op(v).args) {
      ++reads[at(a)];
      if (carried[at(a)]) carried[at(v)] = true;
    }
  }
  for (std::size_t j = p.K; j < body.outputs.size(); ++j) ++as_output[at(body.outputs[j])];  // the ys

  Split s;
  s.carries.resize(p.K);
  s.shifted.assign(p.K, false);
  // First the fresh carries (their next value depends on no carry), then what depends
  // on a carry that is not fresh (dirty): only the reductions' own steps may.
  std::vector<bool> fresh(n, false), dirty(n, false);
  for (std::size_t k = 0; k < p.K; ++k) {
    const Var c = in[p.first_carry() + k], next = body.outputs[k];
    if (next != c && !carried[at(next)]) {
      s.carries[k].kind = Carry::fresh;
      fresh[at(c)] = true;
    } else {
      dirty[at(c)] = true;
    }
  }
  for (Var v = 1; v <= body.size(); ++v)
    for (Var a : body.op(v).args)
      if (dirty[at(a)]) dirty[at(v)] = true;
  for (std::size_t k = 0; k < p.K; ++k) {
    const Var c = in[p.first_carry() + k], next = body.outputs[k];
    Carry& r = s.carries[k];
    if (r.kind == Carry::fresh) continue;
    if (as_output[at(c)] != 0) return std::nullopt;
    if (next == c) {
      if (reads[at(c)] != 0) return std::nullopt;
      r.kind = Carry::passed;
      continue;
    }
    const Op& op = body.op(next);
    if (op.kind != OpKind::call || op.args.size() != 2 || reduce_of(op.prim).all == nullptr) return std::nullopt;
    if (op.prim == &prims::sub() && op.args[0] != c) return std::nullopt;  // t - c alternates signs
    if (reads[at(c)] != 1 || reads[at(next)] != 0 || as_output[at(next)] != 0) return std::nullopt;
    // An f32 sum or product rounds to f32 at every step of the loop; the reduce adds in
    // double (a different value, not a few ulps): left as a scan.
    if (body.type(c).dtype != DType::f64 && op.prim != &prims::maximum() && op.prim != &prims::minimum())
      return std::nullopt;
    r.kind = Carry::reduced;
    r.op = op.prim;
    r.carry_first = op.args[0] == c;
    r.term = r.carry_first ? op.args[1] : op.args[0];
    if ((r.carry_first ? op.args[0] : op.args[1]) != c || body.type(r.term) != body.type(c)) return std::nullopt;
    if (dirty[at(r.term)]) return std::nullopt;
    if (fresh[at(r.term)]) r.fresh_term = carry_of[at(r.term)];
  }
  // A fresh carry read other than as a reduction's term is shifted: its value in
  // iteration i is its initial value for i = 0 and its next value of iteration i - 1
  // after, a stacked input of the batched body.
  for (std::size_t j = 0; j < p.K; ++j) {
    if (s.carries[j].kind != Carry::fresh) continue;
    const Var c = in[p.first_carry() + j];
    int terms = 0;
    for (const Carry& r : s.carries) terms += r.kind == Carry::reduced && r.fresh_term == static_cast<int>(j);
    s.shifted[j] = reads[at(c)] + as_output[at(c)] > terms;
  }
  for (std::size_t j = p.K; j < body.outputs.size(); ++j)
    if (dirty[at(body.outputs[j])]) return std::nullopt;

  // The body without its reductions: inputs the consts, the xs, then each shifted
  // carry; outputs each reduced carry's term that is not a fresh carry, each fresh
  // carry's next value, then the ys.
  TapeBuilder b;
  std::vector<Var> map(n, kNoVar);
  for (std::size_t i = 0; i < in.size(); ++i)
    if (i < p.first_carry() || i >= p.first_x()) map[at(in[i])] = b.input(body.type(in[i]));
  for (std::size_t k = 0; k < p.K; ++k)
    if (s.shifted[k]) map[at(in[p.first_carry() + k])] = b.input(body.type(in[p.first_carry() + k]));
  for (Var v = 1; v <= body.size(); ++v) {
    const Op& op = body.op(v);
    if (op.kind == OpKind::input || dirty[at(v)]) continue;
    std::vector<Var> args;
    for (Var a : op.args) args.push_back(map[at(a)]);
    map[at(v)] = b.copy(op, std::move(args));
  }
  std::vector<Var> outs;
  for (std::size_t k = 0; k < p.K; ++k) {
    const Carry& r = s.carries[k];
    if (r.kind == Carry::reduced && r.fresh_term < 0) outs.push_back(map[at(r.term)]);
    if (r.kind == Carry::fresh) outs.push_back(map[at(body.outputs[k])]);
  }
  for (std::size_t j = p.K; j < body.outputs.size(); ++j) outs.push_back(map[at(body.outputs[j])]);
  b.set_outputs(std::move(outs));
  s.independent = dce(b.finish());
  return s;
}

// Iterations [start, stop) of a stacked value, along its leading axis.
Var rows(TapeBuilder& b, Var stacked, int64_t start, int64_t stop) {
  return b.call(prims::slice(), {stacked}, {{"axis", int64_t{0}}, {"start", start}, {"stop", stop}, {"step", int64_t{1}}});
}

// The scan's results computed without it, or nothing when its iterations depend on
// each other. `args` are its operands in the new tape.
std::optional<std::vector<Var>> batched(TapeBuilder& b, const ScanParams& p, std::span<const Var> args) {
  if (p.reverse || p.has_index || p.policy != CheckpointPolicy::store || p.length < 2) return std::nullopt;
  std::optional<Split> s = split(*p.body, p);
  if (!s) return std::nullopt;
  std::vector<bool> batch(p.C + p.X, false);
  std::vector<Var> operands;
  for (std::size_t i = 0; i < p.C; ++i) operands.push_back(args[p.consts().first + i]);
  for (std::size_t i = 0; i < p.X; ++i) {
    operands.push_back(args[p.xs().first + i]);
    batch[p.C + i] = true;
  }
  // Each fresh carry's position among the independent body's outputs.
  std::vector<std::size_t> out_of(p.K, 0);
  for (std::size_t k = 0, o = 0; k < p.K; ++k) {
    const Carry& r = s->carries[k];
    if (r.kind == Carry::fresh) out_of[k] = o;
    if ((r.kind == Carry::reduced && r.fresh_term < 0) || r.kind == Carry::fresh) ++o;
  }
  // Shifted carries: the fresh carries' next values first (they depend on no carry),
  // batched on their own; then each shifted carry's values, its initial value followed
  // by all its next values but the last, are a stacked input of the whole body.
  if (std::find(s->shifted.begin(), s->shifted.end(), true) != s->shifted.end()) {
    Tape nexts = s->independent;
    std::vector<Var> fresh_outs;
    std::vector<Var> fresh_operands = operands;
    for (std::size_t k = 0; k < p.K; ++k) {
      if (s->carries[k].kind == Carry::fresh) fresh_outs.push_back(nexts.outputs[out_of[k]]);
      if (s->shifted[k]) fresh_operands.push_back(args[p.carries().first + k]);  // not read
    }
    nexts.outputs = std::move(fresh_outs);
    std::vector<bool> fresh_batch = batch;
    fresh_batch.resize(fresh_operands.size(), false);
    const std::vector<Var> stacked_nexts = b.inline_tape(vmap_tape(dce(nexts), fresh_batch, p.length), fresh_operands);
    for (std::size_t k = 0, f = 0; k < p.K; ++k) {
      if (s->carries[k].kind != Carry::fresh) continue;
      const Var all = stacked_nexts[f++];
      if (!s->shifted[k]) continue;
      const Var init = args[p.carries().first + k];
      Shape one{1};
      for (int64_t d : p.body->type(p.body->outputs[k]).shape) one.push_back(d);
      const Var first = b.call(prims::reshape(), {init}, {{"shape", one}});
      operands.push_back(b.call(prims::concat(), {first, rows(b, all, 0, p.length - 1)}, {{"axis", int64_t{0}}}));
      batch.push_back(true);
    }
  }
  const Tape mapped = vmap_tape(s->independent, batch, p.length);
  const std::vector<Var> outs = b.inline_tape(mapped, operands);
  // Each carry's stacked values (reduced with an independent term: the terms; fresh:
  // its next values).
  std::vector<Var> stacked(p.K, kNoVar);
  std::size_t next = 0;
  for (std::size_t k = 0; k < p.K; ++k) {
    const Carry& r = s->carries[k];
    if ((r.kind == Carry::reduced && r.fresh_term < 0) || r.kind == Carry::fresh) stacked[k] = outs[next++];
  }
  std::vector<Var> results;
  for (std::size_t k = 0; k < p.K; ++k) {
    const Var init = args[p.carries().first + k];
    const Carry& r = s->carries[k];
    const Shape& shape = p.body->type(p.body->outputs[k]).shape;
    if (r.kind == Carry::passed) {
      results.push_back(init);
    } else if (r.kind == Carry::fresh) {  // the last iteration's value
      results.push_back(b.call(prims::reshape(), {rows(b, stacked[k], p.length - 1, p.length)}, {{"shape", shape}}));
    } else {
      const Reduce reduce = reduce_of(r.op);
      Var total;
      if (r.fresh_term < 0) {
        total = b.call(*reduce.all, {stacked[k]}, {{"axes", std::vector<int64_t>{0}}});
      } else {  // the fresh carry's initial value, then its values but the last
        const auto j = static_cast<std::size_t>(r.fresh_term);
        const Var earlier = b.call(*reduce.all, {rows(b, stacked[j], 0, p.length - 1)}, {{"axes", std::vector<int64_t>{0}}});
        total = b.call(*reduce.pair, {args[p.carries().first + j], earlier});
      }
      results.push_back(r.carry_first ? b.call(*reduce.apply, {init, total}) : b.call(*reduce.apply, {total, init}));
    }
  }
  for (; next < outs.size(); ++next) results.push_back(outs[next]);
  return results;
}

}  // namespace

bool detail::reduces(const Primitive& p) { return reduce_of(&p).all != nullptr; }

Tape vectorize(const Tape& tape) {
  std::vector<std::vector<Var>> replaced(static_cast<std::size_t>(tape.size()) + 1);
  return passes::rewrite("vectorize", tape, [&](TapeBuilder& b, Var v, const Op& op, std::vector<Var> args) {
    if (op.kind == OpKind::result && !replaced[static_cast<std::size_t>(op.args[0])].empty())
      return replaced[static_cast<std::size_t>(op.args[0])][static_cast<std::size_t>(op.index)];
    if (op.kind != OpKind::call || loop_form(*op.prim) != LoopForm::scan) return b.copy(op, std::move(args));
    // The body first: its loops become batched operations, so that batching this loop
    // does not turn them into scans over batches.
    ScanParams p = ScanParams::read(op.attrs, op.args.size());
    p.body = std::make_shared<const Tape>(cleanup(vectorize(*p.body)));  // (batching leaves views of views)
    if (std::optional<std::vector<Var>> r = batched(b, p, args)) {
      replaced[static_cast<std::size_t>(v)] = std::move(*r);
      return replaced[static_cast<std::size_t>(v)][0];
    }
    Op rebuilt = op;
    rebuilt.attrs = p.attrs(op.attrs);
    return b.copy(rebuilt, std::move(args));
  });
}

}  // namespace reel
