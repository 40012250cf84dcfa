// while_loop: a loop whose condition and body are tapes (after jax.lax.while_loop):
//
//   %r... = while_loop(consts..., init...) {cond={...}, body={...}, num_consts=C[, trips=T][, max_trips=M]}
//
// cond(consts, carries) gives one value of one element (nonzero: run the body again);
// body(consts, carries) gives the next carries. The results are the final carries.
// `max_trips` (optional, reel::WhileOptions::max_trips) bounds the iterations: cond still
// true after max_trips of them is a reel::Error, interpreted or compiled; forward mode
// and batching keep it; reverse mode runs the traced trip count (at most max_trips).
// `trips` is the trip count of the run that recorded the call (a trace, or Tracker's
// recording for reel::back: Primitive::eager_recorded); the loop itself ignores it (it
// runs until cond is false), reverse mode needs it: the gradient tape runs the loop as a
// scan of `trips` iterations whose body first guards that cond is true, then guards that
// cond is false after the last one, so that a run with another trip count raises
// reel::GuardFailure (reel::jit and reel::simplegrad(f) retrace) and scan's two-half
// reverse mode does the rest. Forward mode is a while_loop over the body's jvp
// whose cond reads the primal carries.
//
// Batching (vmap): when cond depends on no batched value every batch element runs the
// same number of iterations, and the batched loop is one while_loop over the batched
// body (a carry batched if it starts batched or its next value depends on a batched
// input; the rest stays unbatched and is broadcast after the loop). When cond is batched
// each batch element has a trip count of its own: the batched loop runs while cond holds
// for any element, and each iteration keeps the carries of the elements whose cond no
// longer holds (a `where` on cond's per-element value; a gather for i64 carries), so
// element j ends with the carries after its own trip count, as the loop of one element
// would. Every carry is then batched, the mask (cond per element, evaluated before the
// loop and after each iteration, as often as the unbatched loop does) is one more carry,
// and the loop has no `trips`: its trip count, the largest of the batch, is not known
// when it is batched. It gets one when it runs where it is recorded (eager_recorded:
// grad of vmap, the vmapped function run under reel::grad or jit_grad), and reverse mode
// then runs that many iterations, each element's carries frozen after its own count by
// the same `where` (whose adjoint passes a frozen element's adjoint on unchanged); the
// guards of that scan hold for any batch with the same largest count. A batched loop
// that has not run (vmap_tape, or one inside another loop's body) is an error in reverse
// mode. vmap of grad of a while_loop sees the scan of `trips` iterations that reverse
// mode made, whose guards then hold only if every element has the traced trip count
// (else reel::GuardFailure).
#include <fmt/format.h>

#include <memory>

#include "prims.hpp"
#include "reel/ir/loop_params.hpp"
#include "reel/ir/evaluate.hpp"
#include "reel/ir/while_loop.hpp"
#include "reel/ir/prims.hpp"

namespace reel {

void throw_max_trips(int64_t max_trips) {
  throw Error(fmt::format("while_loop: cond still holds after {0} iteration{1}, and max_trips is {0} (expected the loop "
                          "to stop within max_trips iterations: a runaway loop, or a max_trips too small)",
                          max_trips, max_trips == 1 ? "" : "s"));
}

std::vector<Tensor> run_while_loop(const Tape& cond, const Tape& body, std::size_t num_consts,
                                   std::vector<Tensor> args, int64_t* trips, int64_t max_trips) {
  int64_t n = 0;
  try {
    while (evaluate(cond, args)[0].item() != 0.0) {  // (nonzero as a guard reads it: NaN goes on)
      if (n == max_trips) throw_max_trips(max_trips);
      std::vector<Tensor> next = evaluate(body, args);
      std::move(next.begin(), next.end(), args.begin() + static_cast<std::ptrdiff_t>(num_consts));
      ++n;
    }
  } catch (const GuardFailure& e) {
    throw GuardFailure(fmt::format("while_loop, iteration {}: {}", n, e.what()));
  }
  if (trips != nullptr) *trips = n;
  args.erase(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(num_consts));
  return args;
}

}  // namespace reel

namespace reel::prims {

namespace {

std::string types_str(std::span<const VarType> ts) {
  std::vector<std::string> v;
  for (const VarType& t : ts) v.push_back(type_str(t));
  return fmt::format("({})", fmt::join(v, ", "));
}

Results<VarType> while_infer(std::span<const VarType> in, const Attrs& a) {
  const WhileParams w = WhileParams::read(a, in.size());
  for (const auto& [name, tape] : {std::pair{"cond", w.cond}, std::pair{"body", w.body}}) {
    const std::vector<VarType> got = tape->input_types();
    if (!std::equal(got.begin(), got.end(), in.begin(), in.end()))
      throw Error(fmt::format("while_loop: expected a {} taking {} (consts, carries), got one taking {}", name,
                              types_str(in), types_str(got)));
  }
  if (w.cond->outputs.size() != 1 || numel(w.cond->type(w.cond->outputs[0]).shape) != 1) {
    std::vector<VarType> outs;
    for (Var o : w.cond->outputs) outs.push_back(w.cond->type(o));
    throw Error(fmt::format("while_loop: expected a cond giving one value of one element, got {}", types_str(outs)));
  }
  if (w.body->outputs.size() != w.K)
    throw Error(fmt::format("while_loop: expected a body giving {} carries, got {} outputs", w.K,
                            w.body->outputs.size()));
  std::vector<VarType> out;
  for (Var o : w.body->outputs) out.push_back(w.body->type(o));
  check_carries("while_loop", in.subspan(w.C), out);
  return out;
}

Results<Tensor> while_eager(std::span<const Tensor> in, const Attrs& a) {
  const WhileParams w = WhileParams::read(a, in.size());
  return run_while_loop(*w.cond, *w.body, w.C, std::vector<Tensor>(in.begin(), in.end()), nullptr, w.max_trips);
}

// Run where the call is recorded: the loop records the trip count of this run, which
// reverse mode reads (a loop batched by vmap with a trip count per batch element gets
// the largest of the batch here).
Results<Tensor> while_eager_recorded(std::span<const Tensor> in, Attrs& a) {
  const WhileParams w = WhileParams::read(a, in.size());
  int64_t trips = 0;
  std::vector<Tensor> out = run_while_loop(*w.cond, *w.body, w.C, std::vector<Tensor>(in.begin(), in.end()), &trips, w.max_trips);
  a.set("trips", trips);
  return out;
}

// Reverse mode: the loop as scan sees it, `trips` iterations of the body behind a guard
// that cond holds. The state hands scan's adjoint its attributes and forward state.
struct WhileGrad {
  Attrs scan_attrs;
  std::shared_ptr<const void> scan_state;
};

Attrs guarded_scan(const WhileParams& w) {
  TapeBuilder k;
  std::vector<Var> in;
  for (const VarType& t : w.body->input_types()) in.push_back(k.input(t));
  (void)k.call(prims::guard(), {k.inline_tape(*w.cond, in)[0]}, {{"expected", true}});
  k.set_outputs(k.inline_tape(*w.body, in));
  ScanParams scan;
  scan.body = std::make_shared<const Tape>(k.finish());
  scan.length = w.trips, scan.C = w.C, scan.K = w.K;
  return scan.attrs();
}

ForwardHalf while_forward(TapeBuilder& b, const ForwardArgs& a) {
  const WhileParams w = WhileParams::read(a.attrs, a.args.size());
  if (!w.has_trips)
    throw Error(
        "grad: while_loop has no trip count (its attribute trips), and reverse mode runs the loop as a scan of that "
        "many iterations. A while_loop gets it when it runs where it is traced or recorded; this one has not run: "
        "a while_loop batched by vmap whose cond reads a batched value, so that its trip count may differ per batch "
        "element, batched without running it (reel::vmap_tape, or inside another loop's body, where each iteration "
        "may take another count). Take vmap of grad instead of grad of vmap there, call the vmapped function under "
        "reel::grad or reel::jit_grad (its largest trip count is then recorded, each element masked after its own), "
        "or give trips=N on the tape");
  auto state = std::make_shared<WhileGrad>();
  state->scan_attrs = guarded_scan(w);
  ForwardHalf half = prims::scan().adjoint_forward(
      b, ForwardArgs{a.args, state->scan_attrs, a.needs, a.results_needed, a.transforms});
  // After the last iteration cond is false, else the loop ran longer than when traced.
  std::vector<Var> in(a.args.begin(), a.args.begin() + static_cast<std::ptrdiff_t>(w.C));
  in.insert(in.end(), half.results.begin(), half.results.end());
  (void)b.call(prims::guard(), {b.inline_tape(*w.cond, in)[0]}, {{"expected", false}});
  state->scan_state = std::move(half.state);
  half.state = std::move(state);
  return half;
}

std::vector<Var> while_adjoint(TapeBuilder& b, const AdjointArgs& a) {
  if (!a.state)
    throw Error("grad: while_loop's adjoint needs its forward half (reverse_mode runs it; call the adjoint through it)");
  const auto& g = *std::static_pointer_cast<const WhileGrad>(a.state);
  AdjointArgs s{a.args, a.out, a.dout, g.scan_attrs, a.needs, a.outs, a.douts, a.transforms, a.residuals,
                g.scan_state};
  return prims::scan().adjoint(b, s);
}

// Forward mode: a while_loop whose carries are the carries and the tangents of the
// active ones, whose consts are the consts and their tangents; its body is the body's
// jvp and its cond the cond on the primal values. A carry is active if its tangent is
// given or its new value depends on an active input.
Results<Var> while_tangent(TapeBuilder& b, const TangentArgs& a) {
  const WhileParams w = WhileParams::read(a.attrs, a.args.size());
  const Tape& body = *w.body;
  const std::size_t n = w.C + w.K;
  std::vector<bool> active(n);
  for (std::size_t i = 0; i < n; ++i) active[i] = a.tangents[i] != kNoVar && is_float(b.type(a.args[i]).dtype);
  carries_fixed_point(body, Flow::forward, active, w.C, w.K,
                      [&](std::size_t c) { return is_float(body.type(body.outputs[c]).dtype); });
  const Tape J = a.transforms->jvp(body, Flags(active));
  // The new loop's inputs: consts, their tangents, carries, theirs. J's: the body's
  // inputs, then the tangents of the active ones.
  TapeBuilder kb, kc;
  std::vector<Var> jin(J.inputs().size()), cin(n);
  std::vector<Var> args;
  std::size_t added[2] = {0, 0};
  for (std::size_t group = 0, t = n; group < 2; ++group) {
    const std::size_t from = group == 0 ? 0 : w.C, to = group == 0 ? w.C : n;
    for (std::size_t i = from; i < to; ++i) {
      const VarType type = b.type(a.args[i]);
      jin[i] = kb.input(type), cin[i] = kc.input(type);
      args.push_back(a.args[i]);
    }
    for (std::size_t i = from; i < to; ++i)
      if (active[i]) {
        const VarType type = b.type(a.args[i]);
        jin[t++] = kb.input(type), (void)kc.input(type);
        args.push_back(b.or_zeros(a.tangents[i], type));
        ++added[group];
      }
  }
  const std::vector<Var> jout = kb.inline_tape(J, jin);
  std::vector<Var> outs(jout.begin(), jout.begin() + static_cast<std::ptrdiff_t>(w.K));
  for (std::size_t c = 0; c < w.K; ++c)
    if (active[w.C + c]) outs.push_back(jout[w.K + c]);
  kb.set_outputs(std::move(outs));
  kc.set_outputs(kc.inline_tape(*w.cond, cin));
  WhileParams jvp = w;
  jvp.cond = std::make_shared<const Tape>(a.transforms->cleanup(kc.finish()));
  jvp.body = std::make_shared<const Tape>(a.transforms->cleanup(kb.finish()));
  jvp.C = w.C + added[0];
  Attrs attrs = jvp.attrs(a.attrs);
  const std::vector<Var> res = b.call_results(prims::while_loop(), std::move(args), std::move(attrs));
  std::vector<Var> tangents(w.K, kNoVar);
  for (std::size_t c = 0, q = w.K; c < w.K; ++c) {
    a.same_outs[c] = res[c];
    if (active[w.C + c]) tangents[c] = res[q++];
  }
  return tangents;
}

// Per batch element: whether the batched cond `go` ([size] + one element) holds, as 1 or
// 0 of a float dtype, shape [size] (nonzero holds, NaN too, as run_while_loop reads it).
Var goes_on(TapeBuilder& k, Var go, int64_t size) {
  if (k.type(go).dtype == DType::i64) go = k.call(prims::cast(), {go}, {{"dtype", DType::f64}});
  go = k.reshape(go, {size});
  return k.call(prims::ne(), {go, k.scalar(0.0, k.type(go).dtype)});
}

// The carry `next` where mask (1/0, [size]) holds, else `old` (both [size] + type).
Var freeze(TapeBuilder& k, Var mask, Var next, Var old, int64_t size) {
  const VarType t = k.type(old);
  if (is_float(t.dtype)) {
    if (k.type(mask).dtype != t.dtype) mask = k.call(prims::cast(), {mask}, {{"dtype", t.dtype}});
    Shape shape(t.shape.size(), 1);
    shape[0] = size;
    return k.call(prims::where(), {k.reshape(mask, shape), next, old});
  }
  // i64 (where takes floats): row j of [old; next] at j + size * mask[j].
  std::vector<double> iota(static_cast<std::size_t>(size));
  for (std::size_t j = 0; j < iota.size(); ++j) iota[j] = static_cast<double>(j);
  const DType md = k.type(mask).dtype;
  const Var rows = k.add(k.constant(tensor(iota, {size}, md)), k.mul(mask, static_cast<double>(size)));
  const Var stacked = k.call(prims::concat(), {old, next}, {{"axis", int64_t{0}}});
  return k.call(prims::gather(), {stacked, k.call(prims::cast(), {rows}, {{"dtype", DType::i64}})}, {{"axis", int64_t{0}}});
}

Results<Var> while_batch(TapeBuilder& b, const BatchArgs& a) {
  const WhileParams w = WhileParams::read(a.attrs, a.args.size());
  const Transforms& tr = *a.transforms;
  std::vector<bool> in(a.batched.begin(), a.batched.end());
  (void)batch_carries(*w.body, in, w.C, w.K);
  const bool per_element = depends_on(*w.cond, in)[0];
  if (per_element)
    for (std::size_t c = 0; c < w.K; ++c) in[w.C + c] = true;
  const std::vector<bool> out(in.begin() + static_cast<std::ptrdiff_t>(w.C), in.end());
  std::vector<Var> args(a.args.begin(), a.args.end());
  for (std::size_t c = 0; c < w.K; ++c)
    if (in[w.C + c]) args[w.C + c] = ensure_batched(b, args[w.C + c], a.batched[w.C + c], a.size);
  Attrs attrs;
  Tape cond, body;
  WhileParams batched = w;
  if (!per_element) {
    attrs = a.attrs;
    cond = batch_loop_body(*w.cond, in, {false}, a.size, tr);
    body = batch_loop_body(*w.body, in, out, a.size, tr);
  } else {
    for (const auto& [name, value] : a.attrs.items())
      if (name != "trips") attrs.set(name, value);
    batched.has_trips = false;  // (unknown: a count per batch element)
    const Flags fl(in);
    const Tape C = tr.batch(*w.cond, fl, a.size), B = tr.batch(*w.body, fl, a.size);
    // One more carry, last: the mask of the elements that go on (cond on the carries,
    // 1 or 0), computed once before the loop and once per iteration.
    args.push_back(goes_on(b, b.inline_tape(C, args)[0], a.size));
    const VarType mask_type = b.type(args.back());
    TapeBuilder kc, kb;
    std::vector<Var> cin, bin;
    for (Var v : C.inputs()) cin.push_back(kc.input(C.type(v))), bin.push_back(kb.input(C.type(v)));
    const Var cmask = kc.input(mask_type), mask = kb.input(mask_type);
    // cond: some element goes on.
    kc.set_outputs({kc.call(prims::sum(), {cmask})});
    // body: the next carries of the elements that go on, the others' as they are; the next mask.
    std::vector<Var> next = kb.inline_tape(B, bin);
    for (std::size_t c = 0; c < w.K; ++c) next[c] = freeze(kb, mask, next[c], bin[w.C + c], a.size);
    std::vector<Var> consts_and_next(bin.begin(), bin.begin() + static_cast<std::ptrdiff_t>(w.C));
    consts_and_next.insert(consts_and_next.end(), next.begin(), next.end());
    next.push_back(kb.mul(mask, goes_on(kb, kb.inline_tape(C, consts_and_next)[0], a.size)));
    kb.set_outputs(std::move(next));
    cond = tr.cleanup(kc.finish()), body = tr.cleanup(kb.finish());
  }
  batched.cond = std::make_shared<const Tape>(std::move(cond));
  batched.body = std::make_shared<const Tape>(std::move(body));
  std::vector<Var> res = b.call_results(prims::while_loop(), std::move(args), batched.attrs(attrs));
  res.resize(w.K);  // (without the mask)
  for (std::size_t c = 0; c < w.K; ++c) res[c] = ensure_batched(b, res[c], out[c], a.size);
  return res;
}

Primitive while_loop_p() {
  return {
      .name = "while_loop",
      .arity = kVariadic,
      .attrs = {{"cond", AttrKind::tape},
                {"body", AttrKind::tape},
                {"num_consts", AttrKind::integer},
                {"trips", AttrKind::integer, true},
                {"max_trips", AttrKind::integer, true}},
      .infer = while_infer,
      .eager = while_eager,
      .adjoint = while_adjoint,
      .any_dtype = true,
      .results = kVariadic,
      .tangent = while_tangent,
      .structure = Structure::loop,
      .adjoint_forward = while_forward,
      .batch = while_batch,
      .eager_recorded = while_eager_recorded,
  };
}

}  // namespace

void add_while(std::vector<Primitive>& t) { t.insert(t.end(), {while_loop_p()}); }

}  // namespace reel::prims
