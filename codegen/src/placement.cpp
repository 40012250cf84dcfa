#include "placement.hpp"

#include <algorithm>

#include "plan.hpp"

namespace reel::codegen {

namespace {

// The order in which operations are placed: the tape's, except that an elementwise or
// broadcasting operation (not an output) waits until something else reads it, and is
// placed just before its first reader if that comes within kMaxWait operations. A
// loop then holds an operation together with its readers although the tape computes
// something of another shape in between (kmeans: -2 P C^T of [n, k], then |C|^2 of
// [k], then the sum of both, was two passes over [n, k]). The operations are pure, so
// the results are the same.
constexpr Var kMaxWait = 16;

}  // namespace

std::vector<Var> placement_order(const Tape& t, const std::vector<bool>& folded) {
  const Var n = t.size();
  std::vector<bool> output(n + 1, false), waiting(n + 1, false), placed(n + 1, false), read_by_place(n + 1, false);
  for (Var o : t.outputs) output[o] = true;
  for (Var v = 1; v <= n; ++v)
    if (t.op(v).kind == OpKind::call && t.op(v).prim->lowering.strided_place)
      for (Var a : t.op(v).args) read_by_place[a] = true;
  std::vector<Var> order;
  order.reserve(static_cast<std::size_t>(n));
  std::vector<std::pair<Var, std::size_t>> stack;  // (variable, next argument to look at)
  auto emit = [&](Var root) {  // root after its waiting arguments, depth first, without recursion
    stack.emplace_back(root, 0);
    while (!stack.empty()) {
      auto& [v, next] = stack.back();
      const Op& op = t.op(v);
      if (op.kind == OpKind::call && next < op.args.size()) {
        const Var a = op.args[next++];
        if (waiting[a] && !placed[a]) stack.emplace_back(a, 0);
        continue;
      }
      if (!placed[v]) placed[v] = true, order.push_back(v);
      stack.pop_back();
    }
  };
  std::size_t oldest = 0;  // waiting[queue[oldest..]] may still wait
  std::vector<Var> queue;
  auto expire = [&](Var v, Var wait) {
    for (; oldest < queue.size() && queue[oldest] + wait <= v; ++oldest)
      if (!placed[queue[oldest]]) emit(queue[oldest]);
  };
  for (Var v = 1; v <= n; ++v) {
    // An operation waits at most kMaxWait operations: a reader far away (a gradient's
    // backward half reading a forward value) would keep its arguments alive as long.
    // It is placed when it has waited that long, after an operation that ends a loop
    // anyway (not a reduction, which a loop may accumulate, a view, a transpose folded
    // into a product or a strided read), so that it does not cut the open loop in two;
    // or after 4 kMaxWait operations.
    expire(v, 4 * kMaxWait);
    const Op& op = t.op(v);
    // Operations of one shape (one loop_shape) keep the tape's order among themselves:
    // one waits only while operations of other shapes come (which would end its loop
    // anyway).
    while (oldest < queue.size() && placed[queue[oldest]]) ++oldest;  // (a scalar tape places them all at once)
    if (op.kind == OpKind::call && oldest < queue.size()) {
      const Shape loop = loop_shape(op.type.shape);
      for (std::size_t q = oldest; q < queue.size(); ++q)
        if (!placed[queue[q]] && has_loop_shape(t.type(queue[q]).shape, loop)) emit(queue[q]);
    }
    // A piece of a placement right after a strided read of its shape that it reads joins
    // the loop that read has just joined (the gradient of x[1:] added to a slice of
    // another: waiting for the placement, it let a read of another shape end that loop
    // first). Other operations keep waiting for their readers (kmeans's case, above).
    const bool after_read =
        v > 1 && read_by_place[v] && placed[v - 1] && op.kind == OpKind::call && t.op(v - 1).kind == OpKind::call &&
        t.op(v - 1).prim->lowering.strided_read && std::find(op.args.begin(), op.args.end(), v - 1) != op.args.end() &&
        loop_shape(t.type(v - 1).shape) == loop_shape(op.type.shape);
    const bool deferred = op.kind == OpKind::call && op.results == 1 && !output[v] && op.prim->pure && !op.prim->effect &&
                          (op.prim->structure == Structure::elementwise || op.prim->structure == Structure::broadcast) &&
                          !after_read;
    if (deferred) {
      waiting[v] = true, queue.push_back(v);
      continue;
    }
    emit(v);
    if (op.kind != OpKind::call) continue;
    const bool joins_loop = op.prim->structure == Structure::reduction || op.prim->structure == Structure::view ||
                            folded[v] || op.prim->lowering.strided_read || after_read;
    if (!joins_loop) expire(v, kMaxWait);
  }
  for (Var v = 1; v <= n; ++v)
    if (waiting[v] && !placed[v]) emit(v);  // (read by nothing: placed at the end)
  return order;
}

}  // namespace reel::codegen
