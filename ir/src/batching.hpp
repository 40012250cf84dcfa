#pragma once
// Internal: small helpers the batching rules (Primitive::batch, see BatchArgs) share.
// In a rule, argument i has a leading batch axis of a.size where a.batched[i]; every
// result it returns must have one.
#include <string>

#include "prims.hpp"

namespace reel::prims {

// [size] + s.
Shape with_batch(int64_t size, const Shape& s);
// Argument i with the batch in front: as it is where batched, else broadcast along a new
// leading axis (an unbatched argument of an operation that needs both batched).
Var batched_arg(TapeBuilder& b, const BatchArgs& a, std::size_t i);
// A batched x ([size] + shape) reshaped to [size, 1, ..., 1] + shape of rank + 1, so that
// it broadcasts (aligned at the trailing axes) against values of rank `rank`.
Var align_batched(TapeBuilder& b, Var x, int64_t size, const Shape& shape, std::size_t rank);
// attrs with `name` set to value.
Attrs with_attr(Attrs attrs, const std::string& name, AttrValue value);
// The axis attribute `name` (default 0 where absent) of a call whose argument has `rank`
// axes, as a non-negative axis, plus one: the same axis behind the batch.
int64_t axis_behind_batch(const Attrs& attrs, const std::string& name, std::size_t rank);
// permute(x, perm), or x where perm is the identity.
Var permuted(TapeBuilder& b, Var x, const Shape& perm);
// x with its axes [from, from + count) moved to start at `to` (the other axes keep their order).
Var move_axes(TapeBuilder& b, Var x, int64_t from, int64_t count, int64_t to);
// A batched x [B, ..., n (axis ax), ...] as [B * n, the other axes...]: row b * n + i is
// x[b, ..., i, ...] (an indexed axis folded into the batch, for gather and scatter).
Var fold_into_batch(TapeBuilder& b, Var x, int64_t ax);
// Batched i64 indices [B] + shape into an axis of length n, as indices into the folded
// [B * n] axis: idx + b * n. An index out of [0, n) stays out of [0, B n) (so the
// operation still reports it).
Var offset_indices(TapeBuilder& b, Var idx, int64_t n);

}  // namespace reel::prims
