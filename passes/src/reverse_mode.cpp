// The reverse-mode pass: forward tape -> gradient tape, built from each primitive's
// adjoint rule, so the result is an ordinary tape that can be differentiated again.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "reel/ir/body_tape.hpp"
#include "reel/ir/builder.hpp"
#include "reel/passes.hpp"
#include "rewrite.hpp"
#include "transforms.hpp"

namespace reel {

namespace {

// How an output's adjoint starts: not at all, at a new input (a seed), or at 1.
enum class Seed { none, input, one };

// The gradient tape of f (see reverse, below), built in three steps: f copied forward
// (a call with an adjoint_forward rule replaced by its forward half), a seed per seeded
// output, then each needed call's adjoint rule from the last call back, each rule's
// gradients summed into its arguments' adjoints.
class Reverse {
 public:
  Reverse(const char* op, const Tape& f)
      : op_(op), f_(f), n_(f.size()), map_(n_ + 1, kNoVar), halves_(n_ + 1), terms_(n_ + 1) {
    b_.reserve(3 * static_cast<std::size_t>(n_));  // the forward copy and about two ops per adjoint
  }

  Tape run(std::span<const Seed> seeds, std::span<const bool> wanted) {
    mark_needed(seeds);
    for (Var v = 1; v <= n_; ++v) copy_forward(v);
    for (std::size_t i = 0; i < f_.outputs.size(); ++i) {
      const Var y = f_.outputs[i];
      if (seeds[i] == Seed::none) continue;
      const Var s = seeds[i] == Seed::input ? b_.input(f_.type(y)) : b_.scalar(1.0, f_.type(y).dtype);
      if (!active_[y]) continue;  // (its seed is still an input: the signature does not depend on the tape)
      add_term(y, s);
    }
    for (Var v = n_; v >= 1; --v)
      if (f_.op(v).kind == OpKind::call && needed_[v]) adjoint_call(v);
    std::vector<Var> outputs;
    for (Var o : f_.outputs) outputs.push_back(map_[o]);
    const std::vector<Var> inputs = f_.inputs();
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (wanted[i]) outputs.push_back(b_.or_zeros(adjoint_of(inputs[i]), f_.type(inputs[i])));
    b_.set_outputs(std::move(outputs));
    return b_.finish();
  }

 private:
  // needed[v]: v depends on an input (active) and a seeded output depends on v (useful).
  // No gradient flows through i64 values. A call with several results (a loop) is as
  // active as its arguments: each result is then active if it is a float, whatever the
  // dtype of the first result, which the call's own variable also names (a loop whose
  // first carry is an i64 index still passes gradients through its float carries).
  void mark_needed(std::span<const Seed> seeds) {
    std::vector<bool> useful(n_ + 1, false), call_active(n_ + 1, false);
    active_.assign(n_ + 1, false);
    needed_.assign(n_ + 1, false);
    for (Var v = 1; v <= n_; ++v) {
      const Op& o = f_.op(v);
      bool a = o.kind == OpKind::input;
      if (o.kind == OpKind::result) a = call_active[o.args[0]];
      else
        for (Var x : o.args) a = a || active_[x];
      call_active[v] = a;
      active_[v] = a && is_float(o.type.dtype);
    }
    for (std::size_t i = 0; i < f_.outputs.size(); ++i)
      if (seeds[i] != Seed::none) useful[f_.outputs[i]] = true;
    for (Var v = n_; v >= 1; --v)
      if (useful[v])
        for (Var a : f_.op(v).args) useful[a] = true;
    for (Var v = 1; v <= n_; ++v) needed_[v] = active_[v] && useful[v];
    // A result operation passes its adjoint to its call (below); its call's rule needs
    // to run if any result's does.
    for (Var v = n_; v >= 1; --v)
      if (f_.op(v).kind == OpKind::result && needed_[v]) needed_[f_.op(v).args[0]] = true;
  }

  // v copied to the gradient tape, or for a call with two-half reverse mode, its
  // forward half (whose results the call's result operations then name).
  void copy_forward(Var v) {
    const Op& o = f_.op(v);
    if (o.kind == OpKind::result && !halves_[o.args[0]].results.empty()) {
      map_[v] = halves_[o.args[0]].results.at(static_cast<std::size_t>(o.index));
      return;
    }
    std::vector<Var> args;
    for (Var a : o.args) args.push_back(map_[a]);
    if (o.kind != OpKind::call || !needed_[v] || !o.prim->adjoint_forward) {
      map_[v] = b_.copy(o, std::move(args));
      return;
    }
    Flags needs(o.args.size()), results_needed(static_cast<std::size_t>(o.results));
    for (std::size_t i = 0; i < o.args.size(); ++i) needs[i] = needed_[o.args[i]];
    for (int i = 0; i < o.results; ++i)
      results_needed[static_cast<std::size_t>(i)] = needed_[v + i] && is_float(f_.type(v + i).dtype);
    halves_[v] = o.prim->adjoint_forward(b_, ForwardArgs{args, o.attrs, needs, results_needed, &detail::pass_transforms()});
    if (halves_[v].results.size() != static_cast<std::size_t>(o.results))
      throw Error(fmt::format("{}: the forward half of '{}' gave {} results, expected {}", op_, o.prim->name,
                              halves_[v].results.size(), o.results));
    map_[v] = halves_[v].results[0];
  }

  // The adjoint rule of the call v, given its results' adjoints (if any flows).
  void adjoint_call(Var v) {
    const Op& o = f_.op(v);
    // The results' variables and adjoints: v, and for several results v + 1, ...
    std::vector<Var> outs, douts;
    bool any = false;
    for (int i = 0; i < o.results; ++i) {
      outs.push_back(map_[v + i]);
      douts.push_back(adjoint_of(v + i));
      any = any || douts.back() != kNoVar;
    }
    if (!any) return;
    std::vector<Var> args;
    Flags needs(o.args.size());
    for (std::size_t i = 0; i < o.args.size(); ++i) {
      args.push_back(map_[o.args[i]]);
      needs[i] = needed_[o.args[i]];
    }
    if (!o.prim->adjoint)
      throw Error(fmt::format("{}: primitive '{}' has no reverse-mode (adjoint) rule", op_, o.prim->name));
    AdjointArgs a{args, map_[v], douts[0], o.attrs, needs, outs, douts};
    a.transforms = &detail::pass_transforms();
    a.residuals = halves_[v].residuals;
    a.state = halves_[v].state;
    const std::vector<Var> d = o.prim->adjoint(b_, a);
    if (d.size() != o.args.size())
      throw Error(fmt::format("{}: the adjoint rule of '{}' returned {} gradients for {} arguments", op_,
                              o.prim->name, d.size(), o.args.size()));
    for (std::size_t i = 0; i < o.args.size(); ++i) {
      if (!needs[i] || d[i] == kNoVar) continue;
      if (b_.type(d[i]) != f_.type(o.args[i]))
        throw Error(fmt::format("{}: the adjoint rule of '{}' returned {} for argument {}, expected {}", op_,
                                o.prim->name, type_str(b_.type(d[i])), i + 1, type_str(f_.type(o.args[i]))));
      add_term(o.args[i], d[i]);
    }
  }

  // A variable used more than once sums its adjoints, added as they come (so that each
  // term's memory can be reused at once: a weight read by each of 1000 steps), except the
  // terms that a primitive's rule may combine (Primitive::combine_terms: slices'
  // gradients), kept until the sum is read. terms_[v]: the running sum (kNoVar before
  // one), then those. Past kMaxPending kept terms, they are combined at once and, unless
  // that at least halved them (slices of one tensor: then one `place` stays kept, and
  // more may join it), added to the running sum: the same slice read at each of 10,000
  // steps keeps at most that many gradients alive.
  static constexpr std::size_t kMaxPending = 16;

  // The terms with the primitives' rules applied: each rule once, the terms scanned again
  // after each (a rule reorders them).
  std::vector<Var> combined(std::vector<Var> t) {
    std::vector<const Primitive*> tried;
    for (bool again = t.size() > 1; again;) {
      again = false;
      for (Var x : t) {
        const Op& op = b_.tape().op(x);
        if (op.kind != OpKind::call || !op.prim->combine_terms ||
            std::find(tried.begin(), tried.end(), op.prim) != tried.end())
          continue;
        tried.push_back(op.prim);
        t = op.prim->combine_terms(b_, std::move(t));
        again = true;
        break;
      }
    }
    return t;
  }

  void add_to(Var& sum, Var x) {
    if (sum == kNoVar) sum = x;
    else if (const Var placed = added_in_place(sum, x); placed != kNoVar) sum = placed;
    else sum = b_.add(sum, x);
  }

  // sum + x, where x places a few pieces along one axis each and covers its result: each
  // piece added to the slice of sum where it goes, then placed. The same additions,
  // without a full-size placement to add afterwards (the gradient of x[0] and x[1:] read
  // apart beside a use of all of x, as scalar code's loops make: lse's). kNoVar
  // otherwise, and for a placement simplify makes simpler (the slices of one tensor put
  // back, pieces of one broadcast: adding that is one loop already), or of many pieces
  // (two operations each).
  Var added_in_place(Var sum, Var x) {
    const Op& op = b_.tape().op(x);
    if (op.kind != OpKind::call || !op.prim->lowering.strided_place || b_.type(sum) != op.type ||
        op.args.size() > kMaxAddedPieces || passes::simpler_placement(b_.tape(), op))
      return kNoVar;
    const Shape& out = op.type.shape;
    const std::optional<std::vector<VarType>> pieces_types = passes::covering_pieces(b_.tape(), op, op.args);
    if (!pieces_types) return kNoVar;
    const std::vector<VarType>& types = *pieces_types;
    for (const VarType& p : types)
      if (p.dtype != op.type.dtype || p.shape.size() != out.size() || numel(p.shape) == 0) return kNoVar;
    const std::vector<int64_t> whole = contiguous_strides(out);
    const std::vector<StridedMap> maps = op.prim->lowering.strided_place(types, op.attrs);
    struct Slice {
      int64_t axis, start, stop, step;
    };
    std::vector<Slice> slices;
    for (std::size_t i = 0; i < op.args.size(); ++i) {
      const Shape& piece = types[i].shape;
      int64_t axis = -1;
      for (std::size_t d = 0; d < out.size(); ++d)
        if (piece[d] != out[d]) {
          if (axis >= 0) return kNoVar;
          axis = static_cast<int64_t>(d);
        }
      if (axis < 0) return kNoVar;
      const auto a = static_cast<std::size_t>(axis);
      int64_t offset = maps[i].offset;
      for (std::size_t d = 0; d < out.size(); ++d)
        if (d != a && out[d] > 1 && maps[i].strides[d] != whole[d]) return kNoVar;
      if (offset % whole[a] != 0 || maps[i].strides[a] % whole[a] != 0) return kNoVar;
      const int64_t start = offset / whole[a], step = maps[i].strides[a] / whole[a];
      if (start >= out[a] || step < 1) return kNoVar;  // (an offset along another axis)
      slices.push_back({axis, start, start + (piece[a] - 1) * step + 1, step});
    }
    // (Copied: adding to the tape may move its operations.)
    const Primitive& prim = *op.prim;
    const std::vector<Var> args = op.args;
    const Attrs attrs = op.attrs;
    std::vector<Var> pieces;
    for (std::size_t i = 0; i < args.size(); ++i) {
      const Slice& s = slices[i];
      const Var part = b_.call(prims::slice(), {sum},
                               {{"axis", s.axis}, {"start", s.start}, {"stop", s.stop}, {"step", s.step}});
      pieces.push_back(b_.add(part, args[i]));
    }
    return b_.call(prim, std::move(pieces), attrs);
  }

  void add_term(Var v, Var d) {
    std::vector<Var>& t = terms_[v];
    if (t.empty()) t.push_back(kNoVar);
    const Op& op = b_.tape().op(d);
    if (op.kind != OpKind::call || !op.prim->combine_terms) return add_to(t[0], d);
    t.push_back(d);
    if (t.size() - 1 <= kMaxPending) return;
    const std::size_t pending = t.size() - 1;
    std::vector<Var> c = combined(std::vector<Var>(t.begin() + 1, t.end()));
    t.resize(1);
    if (c.size() <= pending / 2) t.insert(t.end(), c.begin(), c.end());
    else
      for (Var x : c) add_to(t[0], x);
  }

  Var adjoint_of(Var v) {
    std::vector<Var>& t = terms_[v];
    Var sum = t.empty() ? kNoVar : t[0];
    if (t.size() > 1)
      for (Var x : combined(std::vector<Var>(t.begin() + 1, t.end()))) add_to(sum, x);
    t.assign(sum == kNoVar ? 0 : 1, sum);
    return sum;
  }

  static constexpr std::size_t kMaxAddedPieces = 4;

  const char* op_;
  const Tape& f_;
  const Var n_;
  TapeBuilder b_;
  std::vector<bool> active_, needed_;
  std::vector<Var> map_;
  // A call with two-half reverse mode: what its forward half gave.
  std::vector<ForwardHalf> halves_;
  std::vector<std::vector<Var>> terms_;
};

// The gradient tape of f: f's inputs, then a seed input per output seeded with
// Seed::input; f's outputs, then the gradient of each input where `wanted` (zeros where
// none flows). `op` names the transformation in errors.
Tape reverse(const char* op, const Tape& f, std::span<const Seed> seeds, std::span<const bool> wanted) {
  return Reverse(op, f).run(seeds, wanted);
}

Tape reverse_one(const Tape& f, bool seeded) {
  const char* op = seeded ? "vjp" : "grad";
  verify(op, f);  // a declaration edited by hand is reported as such, not by a rule
  if (f.outputs.size() != 1)
    throw Error(fmt::format("{}: expected a function with one output, got {} outputs", op,
                            f.outputs.size()));
  if (!seeded && !f.type(f.outputs[0]).shape.empty())
    throw Error(fmt::format(
        "grad: the output must be a scalar (0-d tensor), got {}; use reel::vjp with a seed "
        "of the output's shape for a non-scalar output",
        type_str(f.type(f.outputs[0]))));
  const Seed seed[] = {seeded ? Seed::input : Seed::one};
  const std::size_t inputs = f.inputs().size();
  return reverse(op, f, seed, Flags(inputs, true));
}

}  // namespace

Tape reverse_mode(const Tape& tape) { return reverse_one(tape, false); }
Tape reverse_mode_seeded(const Tape& tape) { return reverse_one(tape, true); }

Tape vjp_body(const Tape& body, std::span<const bool> seeded, std::span<const bool> wanted) {
  verify("vjp", body);
  if (seeded.size() != body.outputs.size() || wanted.size() != body.inputs().size())
    throw Error(fmt::format("vjp: expected {} seed flags and {} input flags, got {} and {}", body.outputs.size(),
                            body.inputs().size(), seeded.size(), wanted.size()));
  std::vector<Seed> seeds;
  for (bool s : seeded) seeds.push_back(s ? Seed::input : Seed::none);
  return cleanup(reverse("vjp", body, seeds, wanted));
}

Tape grad_tape(const Tape& tape) { return derivative_pipeline("grad", tape); }
Tape vjp_tape(const Tape& tape) { return derivative_pipeline("vjp", tape); }

}  // namespace reel
