// GradBench's ba: bundle-adjustment reprojection errors and their sparse Jacobian (forward
// mode, vector-mode over the 15 parameters and batched over the observations).
#include "evals.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "reel/ir/loop_params.hpp"

namespace gradbench::evals {

namespace {

// Reprojection errors of all p observations at once: cams [p, 11] (rotation
// angle-axis, centre, f, u0 v0, k1 k2), X [p, 3], w [p, 1], feat [p, 2] -> [p, 2]; or,
// with ax = 0, each of those transposed ([11, p], ..., [1, p] -> [2, p]).
Tensor ba_reproj(const Tensor& cams, const Tensor& X, const Tensor& w, const Tensor& feat0, bool zero_rotation,
                 int64_t ax = 1) {
  const Tensor feat = reel::nodiff(feat0);
  auto col = [ax](const Tensor& t, int64_t a, int64_t b) { return reel::slice(t, ax, a, b); };
  const Tensor rot = col(cams, 0, 3), centre = col(cams, 3, 6), f = col(cams, 6, 7), uv0 = col(cams, 7, 9);
  const Tensor k1 = col(cams, 9, 10), k2 = col(cams, 10, 11);
  const Tensor Xo = X - centre;
  const Tensor theta = reel::sqrt(reel::sum(reel::square(rot), ax, true));  // [p, 1]; not 0 on these inputs
  const Tensor v = rot / theta;
  auto c = [ax](const Tensor& t, int64_t i) { return reel::slice(t, ax, i, i + 1); };
  const Tensor cross = reel::concat({c(v, 1) * c(Xo, 2) - c(v, 2) * c(Xo, 1), c(v, 2) * c(Xo, 0) - c(v, 0) * c(Xo, 2),
                                     c(v, 0) * c(Xo, 1) - c(v, 1) * c(Xo, 0)},
                                    ax);
  const Tensor cos_t = reel::cos(theta);
  // A zero rotation (the reference's sqtheta == 0 branch): X + rot x X, to first order.
  auto rot_cross = [&] {
    return reel::concat({c(rot, 1) * c(Xo, 2) - c(rot, 2) * c(Xo, 1), c(rot, 2) * c(Xo, 0) - c(rot, 0) * c(Xo, 2),
                         c(rot, 0) * c(Xo, 1) - c(rot, 1) * c(Xo, 0)},
                        ax);
  };
  const Tensor Xcam = zero_rotation ? Xo + rot_cross()
                                    : Xo * cos_t + cross * reel::sin(theta) + v * (reel::sum(v * Xo, ax, true) * (1.0 - cos_t));
  const Tensor u = col(Xcam, 0, 2) / col(Xcam, 2, 3);
  const Tensor rsq = reel::sum(reel::square(u), ax, true);
  const Tensor proj = u * ((1.0 + k1 * rsq + k2 * rsq * rsq) * f) + uv0;
  return (proj - feat) * w;
}

struct BaInput {
  int64_t n, m, p;
  bool zero_rotation = false;  // the shared camera's rotation is exactly 0
  Tensor cams, X, w, feat;  // per observation (all p computed, as the eval asks)
};
std::shared_ptr<BaInput> ba_input(const json& input) {
  auto b = std::make_shared<BaInput>();
  // (Column indices go up to 11n + 3m + p.)
  b->n = integer(input, "ba", "n", 1, 1'000'000'000, " (the most cameras this tool takes)");
  b->m = integer(input, "ba", "m", 1, 1'000'000'000, " (the most points this tool takes)");
  b->p = integer(input, "ba", "p", 1, 20'000'000, " (the most observations this tool takes)");
  const Tensor cam = input_tensor(input, "cam"), x = input_tensor(input, "x"), feat = input_tensor(input, "feat");
  const double w = number(input, "w");
  if (cam.numel() != 11 || x.numel() != 3 || feat.numel() != 2) throw reel::Error("ba: expected cam[11], x[3], feat[2]");
  b->zero_rotation = cam.values()[0] == 0 && cam.values()[1] == 0 && cam.values()[2] == 0;
  // n cameras, m points; observation i uses camera i mod n and point i mod m.
  std::vector<double> cams, X, feats;
  const auto cv = cam.values(), xv = x.values(), fv = feat.values();
  for (int64_t i = 0; i < b->p; ++i) {
    cams.insert(cams.end(), cv.begin(), cv.end());
    X.insert(X.end(), xv.begin(), xv.end());
    feats.insert(feats.end(), fv.begin(), fv.end());
  }
  b->cams = reel::tensor(cams, {b->p, 11});
  b->X = reel::tensor(X, {b->p, 3});
  b->w = reel::full({b->p}, w);
  b->feat = reel::tensor(feats, {b->p, 2});
  return b;
}

Prepared ba_objective(const json& input) {
  static const auto f = reel::jit(
      [](const Tensor& cams, const Tensor& X, const Tensor& w, const Tensor& feat, bool zero_rotation) {
        return std::tuple{ba_reproj(cams, X, reel::expand_dims(w, 1), feat, zero_rotation), 1.0 - reel::square(w)};
      },
      kJitOptions);
  auto b = ba_input(input);
  auto out = std::make_shared<std::tuple<Tensor, Tensor>>();
  return {[=] { *out = f(b->cams, b->X, b->w, b->feat, b->zero_rotation); },
          [=] {
            const auto e = std::get<0>(*out).values();
            return json{{"reproj_error", {{"elements", {e.at(0), e.at(1)}}, {"repeated", b->p}}},
                        {"w_err", {{"element", std::get<1>(*out).values().at(0)}, {"repeated", b->p}}}};
          }};
}

// Observations per iteration of the Jacobian's loop (a chunk's intermediates stay in cache).
constexpr int64_t kChunk = 256;

// The Jacobian blocks of c observations in one vector-mode forward pass (jvp_tape(tape,
// 15)): inputs cams [11, c], X [3, c], w [1, c], feat [2, c] (an observation per
// column, so that every operation runs along the observations); output [15, 2, c], the
// derivatives of each observation's 2 errors by its 15 parameters. Each observation's
// parameters get a shift shared by all c (of value -0, which changes nothing), and the
// 15 tangents are the unit vectors of those shifts: since each observation's error
// depends on its own parameters only, the derivative along the shift of parameter k
// is, per observation, the derivative by its own parameter k (the block-sparse
// Jacobian's columns compressed into 15 colours, one per parameter).
reel::Tape ba_block_tape(int64_t c, bool zero_rotation) {
  const reel::Tape one = reel::trace(
      [zero_rotation](const Tensor& cams, const Tensor& X, const Tensor& w, const Tensor& feat, const Tensor& dc,
                      const Tensor& dx, const Tensor& dw) {
        return ba_reproj(reel::nodiff(cams) + dc, reel::nodiff(X) + dx, reel::nodiff(w) + dw, feat, zero_rotation, 0);
      },
      reel::full({11, c}, 1.0), reel::full({3, c}, 1.0), reel::full({1, c}, 1.0), reel::zeros({2, c}),
      reel::zeros({11, 1}), reel::zeros({3, 1}), reel::zeros({1, 1}));
  // Inputs: the 7 above, then their 15 tangents each; outputs: the errors, their tangents.
  const reel::Tape forward = reel::jvp_tape(one, 15);
  reel::TapeBuilder b;
  std::vector<reel::Var> ins;
  for (std::size_t i = 0; i < 4; ++i) ins.push_back(b.input(one.type(one.inputs()[i])));
  const int64_t sizes[3] = {11, 3, 1};
  for (int64_t n : sizes) ins.push_back(b.constant(reel::full({n, 1}, -0.0)));
  for (std::size_t i = 0; i < 4; ++i) {  // the tangents of the parameters (nodiff: unused)
    reel::Shape shape = one.type(one.inputs()[i]).shape;
    shape.insert(shape.begin(), 15);
    ins.push_back(b.broadcast_to(b.scalar(0.0, reel::DType::f64), shape));
  }
  for (int64_t j = 0, at = 0; j < 3; at += sizes[j++]) {  // the shifts' unit tangents
    std::vector<double> unit(static_cast<std::size_t>(15 * sizes[j]), 0.0);
    for (int64_t i = 0; i < sizes[j]; ++i) unit[static_cast<std::size_t>((at + i) * sizes[j] + i)] = 1.0;
    ins.push_back(b.constant(reel::tensor(unit, {15, sizes[j], 1})));
  }
  b.set_outputs({b.inline_tape(forward, ins).at(1)});
  return reel::cleanup(b.finish());
}

// All p observations' blocks: a scan over p / c chunks of c = min(p, kChunk)
// observations (inputs [p / c, 11, c], ... ; blocks [p / c, 15, 2, c]), and when c does
// not divide p, the r = p mod c left (inputs [11, r], ...; blocks [15, 2, r]). Built
// as a tape directly (tracing would run the loop on its example inputs).
reel::Tape ba_jacobian_tape(int64_t p, bool zero_rotation) {
  const int64_t c = std::min(p, kChunk), m = p / c, r = p % c;
  const int64_t sizes[4] = {11, 3, 1, 2};
  reel::TapeBuilder b;
  std::vector<reel::Var> chunks, left;
  for (int64_t n : sizes) chunks.push_back(b.input({reel::DType::f64, {m, n, c}}));
  if (r > 0)
    for (int64_t n : sizes) left.push_back(b.input({reel::DType::f64, {n, r}}));
  // The loop's body: a carry passed on as it is (a scan carries at least one), the
  // chunk's inputs -> the carry, the chunk's blocks.
  reel::TapeBuilder body;
  {
    std::vector<reel::Var> ins{body.input({reel::DType::f64, {}})};
    for (int64_t n : sizes) ins.push_back(body.input({reel::DType::f64, {n, c}}));
    const std::vector<reel::Var> slices(ins.begin() + 1, ins.end());
    body.set_outputs({ins[0], body.inline_tape(ba_block_tape(c, zero_rotation), slices).at(0)});
  }
  reel::ScanParams loop;
  loop.body = std::make_shared<const reel::Tape>(body.finish());
  loop.length = m, loop.K = 1;
  std::vector<reel::Var> args{b.scalar(0.0, reel::DType::f64)};
  args.insert(args.end(), chunks.begin(), chunks.end());
  std::vector<reel::Var> out = b.call_results(reel::primitive("scan"), args, loop.attrs());
  out.erase(out.begin());  // the carry
  if (r > 0) out.push_back(b.inline_tape(ba_block_tape(r, zero_rotation), left).at(0));
  b.set_outputs(out);
  return b.finish();
}

// The inputs of ba_jacobian_tape: each observation's parameters in one column, chunked.
std::vector<Tensor> ba_jacobian_inputs(const BaInput& b) {
  const int64_t c = std::min(b.p, kChunk), m = b.p / c, r = b.p % c;
  const Tensor cols[4] = {b.cams, b.X, reel::expand_dims(b.w, 1), b.feat};  // [p, n] each
  std::vector<Tensor> in, lefts;  // the chunks of each, then what is left of each
  for (const Tensor& t : cols) {
    const int64_t n = t.shape()[1];
    const double* v = t.data<double>();
    Tensor chunks = reel::zeros({m, n, c}), left = reel::zeros({n, r});
    double* out = chunks.mutable_data<double>();
    for (int64_t i = 0; i < m * c; ++i)
      for (int64_t j = 0; j < n; ++j) out[((i / c) * n + j) * c + i % c] = v[i * n + j];
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < n; ++j) left.mutable_data<double>()[j * r + i] = v[(m * c + i) * n + j];
    in.push_back(chunks);
    if (r > 0) lefts.push_back(left);
  }
  in.insert(in.end(), lefts.begin(), lefts.end());
  return in;
}

// The Jacobian's 15 non-zeros per reprojection row, for every observation
// (ba_jacobian_tape: one vector-mode forward pass per chunk). Weight rows: d(1 - w^2)/dw = -2w.
Prepared ba_jacobian(const json& input) {
  static std::mutex mutex;
  static std::map<std::pair<int64_t, bool>, reel::CompiledFunction> compiled;
  auto b = ba_input(input);
  reel::CompiledFunction fn;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto [it, is_new] = compiled.try_emplace({b->p, b->zero_rotation});
    if (is_new) it->second = reel::compile(ba_jacobian_tape(b->p, b->zero_rotation), kJitOptions.compile);
    fn = it->second;
  }
  auto blocks = std::make_shared<std::vector<Tensor>>();  // [p / c, 15, 2, c] (and [15, 2, r])
  auto werr = std::make_shared<Tensor>();
  auto inputs = std::make_shared<std::vector<Tensor>>(ba_jacobian_inputs(*b));  // made before the timed runs
  return {[=] {
            *blocks = fn(*inputs);
            *werr = -2.0 * b->w;
          },
          [=] {
            // CSR: rows 2i and 2i+1 hold 15 non-zeros each (camera, point, weight columns),
            // row 2p + i one; the first 30 row offsets and non-zeros, then the last ones.
            json rows = json::array(), cols = json::array(), vals = json::array();
            for (int64_t r = 0; r < 30; ++r) rows.push_back(r <= 2 * b->p ? 15 * r : 30 * b->p + (r - 2 * b->p));
            rows.push_back(31 * b->p);
            const int64_t cam0 = 0, pt0 = 0;
            for (int r = 0; r < 2; ++r)
              for (int64_t k = 0; k < 15; ++k) {
                cols.push_back(k < 11 ? 11 * cam0 + k : k < 14 ? 11 * b->n + 3 * pt0 + (k - 11) : 11 * b->n + 3 * b->m);
                vals.push_back(blocks->at(0).data<double>()[(2 * k + r) * std::min(b->p, kChunk)]);  // observation 0
              }
            cols.push_back(11 * b->n + 3 * b->m + b->p - 1);
            vals.push_back(werr->values().at(static_cast<std::size_t>(b->p - 1)));
            return json{{"rows", rows}, {"cols", cols}, {"vals", vals}};
          }};
}

}  // namespace

Functions ba_functions() { return {{"objective", ba_objective}, {"jacobian", ba_jacobian}}; }

}  // namespace gradbench::evals
