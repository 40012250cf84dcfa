// Algebraic simplification of the identities the reverse pass produces most: a seed of
// ones multiplied in (x * 1 -> x), double negation, a reshape of a reshape, slices put
// back where they came from (a stack of a tensor's slices is the tensor; so is the
// gradient of those slices), pieces of one broadcast value placed side by side (its
// broadcast), a slice of all of a tensor, a small view, strided read or
// placement of constants (a column of a Jacobian's seeds: a constant too). Only exact
// IEEE identities (x + 0 is not one: -0 + 0 is +0), and only where the kept operand
// already has the result's type, so no broadcast is lost.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>

#include "reel/ir/prims.hpp"
#include "reel/passes.hpp"
#include "rewrite.hpp"

namespace reel {

namespace {

// True if v is a constant whose every element is `value` (with its sign, so that
// +0 and -0 differ), or a broadcast of one.
bool is_filled_with(const Tape& t, Var v, double value) {
  const Op* op = &t.op(v);
  while (op->kind == OpKind::call && op->prim->structure == Structure::broadcast) op = &t.op(op->args[0]);
  if (op->kind != OpKind::constant) return false;
  for (double x : op->value.values())
    if (x != value || std::signbit(x) != std::signbit(value)) return false;
  return true;
}

bool same_map(const StridedMap& x, const StridedMap& y, const Shape& shape) {
  if (x.offset != y.offset || x.strides.size() != shape.size() || y.strides.size() != shape.size()) return false;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (shape[d] > 1 && x.strides[d] != y.strides[d]) return false;  // (a stride of a length-1 axis is never used)
  return true;
}

constexpr int64_t kFoldedElements = 64;

// A strided placement (concat, unslice, place) that puts back, where they came from, the
// strided reads (slices) of one tensor that together cover it, is that tensor: the
// gradient of a stack of slices, or a slice's gradient covering the whole axis.
Var placed_back(const Tape& t, const Op& op, const std::vector<Var>& a) {
  if (!op.prim->lowering.strided_place || a.empty()) return kNoVar;
  const std::optional<std::vector<VarType>> pieces = passes::covering_pieces(t, op, a);
  if (!pieces) return kNoVar;
  const std::vector<VarType>& types = *pieces;
  const std::vector<StridedMap> places = op.prim->lowering.strided_place(types, op.attrs);
  const std::vector<int64_t> whole = contiguous_strides(op.type.shape);
  if (a.size() == 1 && types[0] == op.type && same_map(places[0], {0, whole}, op.type.shape)) return a[0];
  Var source = kNoVar;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Op& read = t.op(a[i]);
    if (read.kind != OpKind::call || !read.prim->lowering.strided_read || read.args.size() != 1) return kNoVar;
    if (source == kNoVar) source = read.args[0];
    if (read.args[0] != source || t.type(source) != op.type) return kNoVar;
    if (!same_map(read.prim->lowering.strided_read(t.type(source), read.attrs), places[i], types[i].shape)) return kNoVar;
  }
  return source;
}

// Whether u and w are the same value: the same variable, small constants with the same
// elements, or the same pure operation of the same values, up to `depth` operations
// deep (the reverse pass computes some twice, `neg(g)` and its reshape for each slice's
// gradient; cse merges them only later).
bool same_value(const Tape& t, Var u, Var w, int depth) {
  if (u == w) return true;
  const Op &a = t.op(u), &b = t.op(w);
  if (a.kind == OpKind::constant && b.kind == OpKind::constant) {  // (small ones: a folded view's, twice)
    if (a.type != b.type || numel(a.type.shape) > kFoldedElements) return false;
    const std::vector<double> x = a.value.values(), y = b.value.values();
    return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](double p, double q) {
      return std::bit_cast<uint64_t>(p) == std::bit_cast<uint64_t>(q);  // (bits: -0 is not +0)
    });
  }
  if (depth == 0 || a.kind != OpKind::call || b.kind != OpKind::call || a.prim != b.prim || !a.prim->pure ||
      a.prim->effect || a.results != 1 || a.type != b.type || a.args.size() != b.args.size() || !(a.attrs == b.attrs))
    return false;
  for (std::size_t i = 0; i < a.args.size(); ++i)
    if (!same_value(t, a.args[i], b.args[i], depth - 1)) return false;
  return true;
}

// A strided placement whose pieces are all one value v, each broadcast to its piece's
// shape (or v itself), is v broadcast to the whole: the gradient of a row's slices that
// all read one number (a sum's seed spread over a split loop) would otherwise be written
// out in full for the next loop to read. Holds when v varies only along dimensions
// each piece spans whole and in place (same stride, no offset there). Returns v.
Var placed_broadcast(const Tape& t, const Op& op, const std::vector<Var>& a) {
  if (!op.prim->lowering.strided_place || a.size() < 2 || numel(op.type.shape) == 0) return kNoVar;
  const Shape& out = op.type.shape;
  const std::vector<int64_t> whole = contiguous_strides(out);
  Var source = kNoVar;
  for (Var x : a) {
    Var s = x;
    while (t.op(s).kind == OpKind::call && t.op(s).prim->structure == Structure::broadcast) s = t.op(s).args[0];
    if (source == kNoVar) source = s;
    if (!same_value(t, s, source, 3)) return kNoVar;
  }
  const std::optional<std::vector<VarType>> pieces = passes::covering_pieces(t, op, a);
  const VarType& v = t.type(source);
  if (!pieces || v.dtype != op.type.dtype || v.shape.size() > out.size()) return kNoVar;
  const std::vector<VarType>& types = *pieces;
  Shape vs(out.size() - v.shape.size(), 1);  // (aligned to the right, as broadcasting is)
  vs.insert(vs.end(), v.shape.begin(), v.shape.end());
  const std::vector<StridedMap> places = op.prim->lowering.strided_place(types, op.attrs);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Shape& piece = types[i].shape;
    if (piece.size() != out.size()) return kNoVar;
    for (std::size_t d = 0; d < out.size(); ++d) {
      if (vs[d] == 1) continue;
      const int64_t at = out[d] > 0 ? places[i].offset / whole[d] % out[d] : 0;
      if (vs[d] != out[d] || piece[d] != out[d] || places[i].strides[d] != whole[d] || at != 0) return kNoVar;
    }
  }
  return source;
}

// A view, strided read or strided placement of constants only moves their elements:
// folded into a new constant when that is small (a larger one would be one more copy in
// memory). Placements too, since the slices of a constant that a placement would have
// put back where they came from (placed_back) are constants by then.
template <class Builder>
Var folded(Builder& b, const Op& op, const std::vector<Var>& a) {
  const Primitive& p = *op.prim;
  const Tape& t = b.tape();
  const bool moves = p.structure == Structure::view || (p.lowering.strided_read && a.size() == 1) ||
                     p.lowering.strided_place;
  if (!moves || !p.eager || a.empty() || numel(op.type.shape) > kFoldedElements) return kNoVar;
  std::vector<Tensor> values;
  for (Var x : a) {
    if (t.op(x).kind != OpKind::constant) return kNoVar;
    values.push_back(t.op(x).value);
  }
  return b.constant(p.eager(values, op.attrs)[0]);
}

// The simpler variable equal to `op` (with arguments `a` in the new tape), or kNoVar.
// Reads the primitives' properties (identity elements, involution, views, strided
// reads and placements), not their names.
template <class Builder>
Var simpler(Builder& b, const Op& op, const std::vector<Var>& a) {
  if (op.kind != OpKind::call || op.results != 1) return kNoVar;
  const Tape& t = b.tape();
  const Primitive& p = *op.prim;
  if (const Var c = folded(b, op, a); c != kNoVar) return c;
  if (p.structure == Structure::view && a.size() == 1) {  // a view of a view is one view; of itself, nothing
    const Op& inner = t.op(a[0]);
    const Var source = inner.kind == OpKind::call && inner.prim->structure == Structure::view ? inner.args[0] : a[0];
    if (t.type(source) == op.type) return source;
    return source != a[0] ? b.copy(op, {source}) : kNoVar;
  }
  if (const Var x = placed_back(t, op, a); x != kNoVar) return x;
  if (const Var v = placed_broadcast(t, op, a); v != kNoVar) {
    if (t.type(v) == op.type) return v;
    Op spread;
    spread.prim = &prims::broadcast_to();
    spread.args = {v};
    spread.attrs = {{"shape", op.type.shape}};
    spread.type = op.type;
    return b.take(std::move(spread));
  }
  // A strided read of all of its argument, in order (a slice of a whole axis), is it.
  if (p.lowering.strided_read && a.size() == 1 && t.type(a[0]) == op.type &&
      same_map(p.lowering.strided_read(t.type(a[0]), op.attrs), {0, contiguous_strides(op.type.shape)}, op.type.shape))
    return a[0];
  auto same_type = [&](Var v) { return t.type(v) == op.type; };
  if (a.size() == 2) {
    if (p.left_identity && is_filled_with(t, a[0], *p.left_identity) && same_type(a[1])) return a[1];
    if (p.right_identity && is_filled_with(t, a[1], *p.right_identity) && same_type(a[0])) return a[0];
  } else if (a.size() == 1 && p.involution) {
    const Op& inner = t.op(a[0]);
    if (inner.kind == OpKind::call && inner.prim == op.prim) return inner.args[0];
  }
  return kNoVar;
}

// Builder: TapeBuilder, or passes::InPlace (each operation's place takes at most one).
template <class Builder>
Var simplify_step(Builder& b, Var, Op&& op) {
  const Var s = simpler(b, op, op.args);
  return s != kNoVar ? s : b.take(std::move(op));
}

}  // namespace

std::optional<std::vector<VarType>> passes::covering_pieces(const Tape& t, const Op& op, const std::vector<Var>& a) {
  std::vector<VarType> types;
  int64_t placed = 0;
  for (Var x : a) {
    types.push_back(t.type(x));
    placed += numel(types.back().shape);
  }
  if (placed != numel(op.type.shape)) return std::nullopt;  // (placements put no element twice: this covers all)
  return types;
}

bool passes::simpler_placement(const Tape& t, const Op& op) {
  return placed_back(t, op, op.args) != kNoVar || placed_broadcast(t, op, op.args) != kNoVar;
}

Tape simplify(const Tape& tape) { return passes::rewrite_ops("simplify", tape, simplify_step<TapeBuilder>); }
Tape passes::simplify(Tape&& tape) { return compact(std::move(tape), simplify_step<InPlace>); }

}  // namespace reel
