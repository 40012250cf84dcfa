// matmul and batch_matmul: which transposes a product reads as stored, and its CBLAS
// steps (gemv, gemm, a batch of gemms), with their row.
#include "kernels/matmul.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "reel/blas.hpp"
#include "schedule.hpp"

namespace reel::codegen {

bool swaps_last_two(const Tape& t, const Op& op) {
  if (!op.prim->lowering.strided_read || op.args.size() != 1) return false;
  const Shape& in = t.type(op.args[0]).shape;
  const std::size_t r = in.size();
  if (r < 2 || op.type.shape.size() != r) return false;
  const StridedMap map = op.prim->lowering.strided_read(t.type(op.args[0]), op.attrs);
  if (map.offset != 0 || map.strides.size() != r) return false;
  const std::vector<int64_t> contiguous = broadcast_strides(in, in);
  for (std::size_t d = 0; d + 2 < r; ++d)
    if (op.type.shape[d] != in[d] || (in[d] != 1 && map.strides[d] != contiguous[d])) return false;
  return op.type.shape[r - 2] == in[r - 1] && op.type.shape[r - 1] == in[r - 2] &&
         (in[r - 1] == 1 || map.strides[r - 2] == 1) && (in[r - 2] == 1 || map.strides[r - 1] == in[r - 1]);
}

// A transpose (or a swap of the last two axes) is folded into the matrix products
// reading it if nothing else reads it but other such transposes, themselves folded
// (the transpose of a transpose: the matrix as stored). Decided from the last
// variable back, so a transpose's readers are decided before it: each marks its
// arguments as read by something else unless it is a product or folded.
std::vector<bool> folded_transposes(const Tape& t) {
  const Var n = t.size();
  std::vector<bool> folded(n + 1, false), read_otherwise(n + 1, false);
  for (Var o : t.outputs) read_otherwise[o] = true;
  for (Var v = n; v >= 1; --v) {
    const Op& op = t.op(v);
    if (op.kind != OpKind::call) continue;
    folded[v] = !read_otherwise[v] && is_float(op.type.dtype) &&
                (op.prim->structure == Structure::permutation || swaps_last_two(t, op));
    if (op.prim->structure == Structure::contraction || folded[v]) continue;
    for (Var a : op.args) read_otherwise[a] = true;
  }
  return folded;
}

namespace {

// batch_matmul (out [..., m, n]): a gemm per batch element on the matrices where they
// are (each argument's batch dimensions broadcast to the result's: stride 0).
void schedule_batched(Scheduler& sch, const MatmulStep& mm) {
  const Tape& t = sch.tape();
  const Shape& as = t.type(mm.a).shape;
  const Shape& bs = t.type(mm.b).shape;
  const Shape& os = t.type(mm.out).shape;
  const std::size_t r = os.size();
  BatchGemmArgs g;
  g.gemm = GemmArgs{.dtype = t.type(mm.out).dtype,
                    .a = sch.ref_of(mm.a),
                    .b = sch.ref_of(mm.b),
                    .c = sch.ref_of(mm.out),
                    .trans_a = mm.trans_a,
                    .trans_b = mm.trans_b,
                    .m = os[r - 2],
                    .n = os[r - 1],
                    .k = mm.trans_a ? as[as.size() - 2] : as.back(),
                    .lda = as.back(),
                    .ldb = bs.back(),
                    .ldc = os[r - 1]};
  // Element strides of each operand's matrices along the result's batch dimensions.
  auto batch_strides = [&](const Shape& s) {
    std::vector<int64_t> out(r - 2, 0);
    int64_t stride = s[s.size() - 2] * s.back();
    for (std::size_t i = 0; i + 2 < s.size(); ++i) {  // s's batch dims from the last
      const std::size_t d = s.size() - 3 - i, o = r - 3 - i;
      if (s[d] != 1) out[o] = stride;
      stride *= s[d];
    }
    return out;
  };
  g.batch.assign(os.begin(), os.end() - 2);
  std::vector<std::vector<int64_t>> strides{batch_strides(as), batch_strides(bs), batch_strides(os)};
  coalesce(g.batch, strides);
  g.stride_a = strides[0], g.stride_b = strides[1], g.stride_c = strides[2];
  int64_t count = 1;
  for (int64_t b : g.batch) count *= b;
  // Products too small to be cut into blocks (blas.cpp: below 2 kBlockMacs multiply-adds)
  // run on the pool, in chunks of about 2^17 multiply-adds (one product each from 2^17:
  // gmm's 100 products of 1000 x 20 x 20 had run one after another on one thread);
  // larger ones one after another, each cut into blocks on the pool.
  const int64_t macs = g.gemm.m * g.gemm.n * g.gemm.k;
  if (count > 1 && macs > 0 && static_cast<double>(macs) < 2 * blas::kBlockMacs)
    g.chunk = std::max<int64_t>(1, (int64_t{1} << 17) / macs);
  if (g.chunk >= count) g.chunk = 0;
  if (count > 0 && g.gemm.m > 0 && g.gemm.n > 0) sch.add_step(std::move(g));
}

void schedule_matmul(Scheduler& sch, const MatmulStep& m) {
  const Tape& t = sch.tape();
  const Shape& as = t.type(m.a).shape;
  const Shape& bs = t.type(m.b).shape;
  const DType dtype = t.type(m.out).dtype;
  if (t.type(m.out).shape.size() > 2) return schedule_batched(sch, m);
  if (bs.size() == 1) {
    sch.add_step(GemvArgs{.dtype = dtype,
                                    .a = sch.ref_of(m.a),
                                    .x = sch.ref_of(m.b),
                                    .y = sch.ref_of(m.out),
                                    .trans_a = m.trans_a,
                                    .rows = as[0],
                                    .cols = as[1]});
    return;
  }
  const int64_t N = m.trans_b ? bs[0] : bs[1];
  sch.add_step(GemmArgs{.dtype = dtype,
                                  .a = sch.ref_of(m.a),
                                  .b = sch.ref_of(m.b),
                                  .c = sch.ref_of(m.out),
                                  .trans_a = m.trans_a,
                                  .trans_b = m.trans_b,
                                  .m = m.trans_a ? as[1] : as[0],
                                  .n = N,
                                  .k = m.trans_a ? as[0] : as[1],
                                  .lda = as[1],
                                  .ldb = bs[1],
                                  .ldc = N});
}

// What a product costs: its multiply-adds; larger ones are cut into blocks.
StepCost matmul_cost(const Tape& t, const Step& step, int64_t) {
  const auto& m = std::get<MatmulStep>(step);
  const Shape& a = t.type(m.a).shape;  // the summed dimension: a's last (its rows' if transposed)
  const int64_t k = a.size() >= 2 && m.trans_a ? a[a.size() - 2] : a.empty() ? 1 : a.back();
  const double macs = static_cast<double>(numel(t.type(m.out).shape)) * static_cast<double>(k);
  return {true, macs >= blas::kBlockMacs / 2 && macs < 2 * blas::kBlockMacs};
}

}  // namespace

extern const StepRow matmul_step_row{
    .index = step_index<MatmulStep>,
    .schedule = [](Scheduler& s, const Step& step) { schedule_matmul(s, std::get<MatmulStep>(step)); },
    .accesses =
        [](const Tape&, const Plan&, const Step& step, const AccessFn& f) {
          const auto& m = std::get<MatmulStep>(step);
          f(m.a, false);
          f(m.b, false);
          f(m.out, true);
        },
    .cost = matmul_cost,
    .text =
        [](const Tape&, const Plan&, const Step& step) {
          const auto& m = std::get<MatmulStep>(step);
          return fmt::format("cblas %{} = %{}{} x %{}{}", m.out, m.a, m.trans_a ? "^T" : "", m.b, m.trans_b ? "^T" : "");
        },
    .scratch = nullptr};

}  // namespace reel::codegen
