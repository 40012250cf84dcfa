// Helpers of the batching rules (see batching.hpp).
#include "batching.hpp"

#include <numeric>

namespace reel::prims {

Shape with_batch(int64_t size, const Shape& s) {
  Shape r{size};
  r.insert(r.end(), s.begin(), s.end());
  return r;
}

Var batched_arg(TapeBuilder& b, const BatchArgs& a, std::size_t i) {
  return a.batched[i] ? a.args[i] : b.broadcast_to(a.args[i], with_batch(a.size, a.types[i].shape));
}

Var align_batched(TapeBuilder& b, Var x, int64_t size, const Shape& shape, std::size_t rank) {
  Shape s{size};
  s.insert(s.end(), rank - shape.size(), 1);
  s.insert(s.end(), shape.begin(), shape.end());
  return b.reshape(x, s);
}

Attrs with_attr(Attrs attrs, const std::string& name, AttrValue value) {
  attrs.set(name, std::move(value));
  return attrs;
}

int64_t axis_behind_batch(const Attrs& attrs, const std::string& name, std::size_t rank) {
  const int64_t axis = attrs.has(name) ? attrs.integer(name) : 0;
  return (axis < 0 ? axis + static_cast<int64_t>(rank) : axis) + 1;
}

Var permuted(TapeBuilder& b, Var x, const Shape& perm) {
  for (std::size_t d = 0; d < perm.size(); ++d)
    if (perm[d] != static_cast<int64_t>(d)) return b.call(prims::permute(), {x}, {{"perm", perm}});
  return x;
}

Var move_axes(TapeBuilder& b, Var x, int64_t from, int64_t count, int64_t to) {
  Shape rest(b.type(x).shape.size()), perm;
  std::iota(rest.begin(), rest.end(), int64_t{0});
  rest.erase(rest.begin() + from, rest.begin() + from + count);
  for (int64_t d = 0; d < static_cast<int64_t>(rest.size()) + count; ++d)
    perm.push_back(d >= to && d < to + count ? from + d - to : rest[static_cast<std::size_t>(d < to ? d : d - count)]);
  return permuted(b, x, perm);
}

Var fold_into_batch(TapeBuilder& b, Var x, int64_t ax) {
  const Var front = move_axes(b, x, ax, 1, 1);
  Shape s = b.type(front).shape;
  s[1] *= s[0];
  s.erase(s.begin());
  return b.reshape(front, s);
}

Var offset_indices(TapeBuilder& b, Var idx, int64_t n) {
  const Shape shape = b.type(idx).shape;
  const int64_t size = shape[0];
  std::vector<double> offsets;
  for (int64_t j = 0; j < size; ++j) offsets.push_back(static_cast<double>(j * n));
  Shape oshape(shape.size(), 1);
  oshape[0] = size;
  // In f64 (exact below 2^53): the arithmetic primitives take floating-point values only.
  const Var f = b.call(prims::cast(), {idx}, {{"dtype", DType::f64}});
  const Var out_of_range = b.sub(b.call(prims::ge(), {f, b.scalar(static_cast<double>(n), DType::f64)}),
                                 b.call(prims::lt(), {f, b.scalar(0.0, DType::f64)}));
  const Var shifted = b.add(b.add(f, b.constant(tensor(offsets, oshape))),
                            b.mul(out_of_range, static_cast<double>(size * n)));
  return b.call(prims::cast(), {shifted}, {{"dtype", DType::i64}});
}

}  // namespace reel::prims
