// GradBench's ba: bundle-adjustment reprojection errors and their sparse Jacobian (forward
// mode, vector-mode over the 15 parameters and batched over the observations).
#include "evals.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

namespace gradbench::evals {

namespace {

// Reprojection errors of all p observations at once: cams [p, 11] (rotation
// angle-axis, centre, f, u0 v0, k1 k2), X [p, 3], w [p], feat [p, 2] -> [p, 2].
Tensor ba_reproj(const Tensor& cams, const Tensor& X, const Tensor& w, const Tensor& feat0, bool zero_rotation) {
  const Tensor feat = reel::nodiff(feat0);
  auto col = [](const Tensor& t, int64_t a, int64_t b) { return reel::slice(t, 1, a, b); };
  const Tensor rot = col(cams, 0, 3), centre = col(cams, 3, 6), f = col(cams, 6, 7), uv0 = col(cams, 7, 9);
  const Tensor k1 = col(cams, 9, 10), k2 = col(cams, 10, 11);
  const Tensor Xo = X - centre;
  const Tensor theta = reel::sqrt(reel::sum(reel::square(rot), 1, true));  // [p, 1]; not 0 on these inputs
  const Tensor v = rot / theta;
  auto c = [](const Tensor& t, int64_t i) { return reel::slice(t, 1, i, i + 1); };
  const Tensor cross = reel::concat({c(v, 1) * c(Xo, 2) - c(v, 2) * c(Xo, 1), c(v, 2) * c(Xo, 0) - c(v, 0) * c(Xo, 2),
                                     c(v, 0) * c(Xo, 1) - c(v, 1) * c(Xo, 0)},
                                    1);
  const Tensor cos_t = reel::cos(theta);
  // A zero rotation (the reference's sqtheta == 0 branch): X + rot x X, to first order.
  auto rot_cross = [&] {
    return reel::concat({c(rot, 1) * c(Xo, 2) - c(rot, 2) * c(Xo, 1), c(rot, 2) * c(Xo, 0) - c(rot, 0) * c(Xo, 2),
                         c(rot, 0) * c(Xo, 1) - c(rot, 1) * c(Xo, 0)},
                        1);
  };
  const Tensor Xcam = zero_rotation ? Xo + rot_cross()
                                    : Xo * cos_t + cross * reel::sin(theta) + v * (reel::sum(v * Xo, 1, true) * (1.0 - cos_t));
  const Tensor u = col(Xcam, 0, 2) / col(Xcam, 2, 3);
  const Tensor rsq = reel::sum(reel::square(u), 1, true);
  const Tensor proj = u * ((1.0 + k1 * rsq + k2 * rsq * rsq) * f) + uv0;
  return (proj - feat) * reel::expand_dims(w, 1);
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
        return std::tuple{ba_reproj(cams, X, w, feat, zero_rotation), 1.0 - reel::square(w)};
      },
      {.compile_after = 1});
  auto b = ba_input(input);
  auto out = std::make_shared<std::tuple<Tensor, Tensor>>();
  return {[=] { *out = f(b->cams, b->X, b->w, b->feat, b->zero_rotation); },
          [=] {
            const auto e = std::get<0>(*out).values();
            return json{{"reproj_error", {{"elements", {e.at(0), e.at(1)}}, {"repeated", b->p}}},
                        {"w_err", {{"element", std::get<1>(*out).values().at(0)}, {"repeated", b->p}}}};
          }};
}

// One observation's reprojection error: z [15] (camera 11, point 3, weight 1), feat [2] -> [2].
Tensor ba_reproj_one(const Tensor& z, const Tensor& feat, bool zero_rotation) {
  const Tensor e = ba_reproj(reel::reshape(reel::slice(z, 0, 11), {1, 11}), reel::reshape(reel::slice(z, 11, 14), {1, 3}),
                             reel::slice(z, 14, 15), reel::reshape(feat, {1, 2}), zero_rotation);
  return reel::reshape(e, {2});
}

// The tape of every observation's error and its 15 x 2 Jacobian block at once: the
// per-observation function's forward-mode Jacobian (vector-mode jvp_tape with the 15
// unit tangents, one pass), batched over the p observations by the batching pass
// (vmap_tape). Inputs z [p, 15], feat [p, 2]; outputs the errors [p, 2] and the blocks
// [p, 15, 2] (block k: d error / d z_k).
reel::Tape ba_jacobian_tape(int64_t p, bool zero_rotation) {
  const reel::Tape one = reel::trace(
      [zero_rotation](const Tensor& z, const Tensor& feat) { return ba_reproj_one(z, feat, zero_rotation); },
      reel::zeros({15}) + 1.0, reel::zeros({2}));
  const reel::Tape forward = reel::jvp_tape(one, 15);  // z, feat, their 15 tangents -> error, its 15 tangents
  reel::TapeBuilder b;
  const reel::Var z = b.input(one.type(one.inputs()[0])), feat = b.input(one.type(one.inputs()[1]));
  std::vector<double> eye(15 * 15, 0.0);
  for (std::size_t k = 0; k < 15; ++k) eye[k * 16] = 1.0;
  const std::vector<reel::Var> ins{z, feat, b.constant(reel::tensor(eye, {15, 15})), b.constant(reel::zeros({15, 2}))};
  b.set_outputs(b.inline_tape(forward, ins));
  return reel::vmap_tape(b.finish(), std::vector<bool>{true, true}, p);
}

// The Jacobian's 15 non-zeros per reprojection row, for every observation at once
// (ba_jacobian_tape: one batched pass). Weight rows: d(1 - w^2)/dw = -2w.
Prepared ba_jacobian(const json& input) {
  static std::mutex mutex;
  static std::map<std::pair<int64_t, bool>, reel::CompiledFunction> compiled;
  auto b = ba_input(input);
  reel::CompiledFunction fn;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto [it, is_new] = compiled.try_emplace({b->p, b->zero_rotation});
    if (is_new) it->second = reel::compile(ba_jacobian_tape(b->p, b->zero_rotation));
    fn = it->second;
  }
  auto blocks = std::make_shared<Tensor>();  // [p, 15, 2]
  auto werr = std::make_shared<Tensor>();
  // Each observation's parameters in one row, made before the timed runs.
  auto inputs = std::make_shared<std::vector<Tensor>>(std::vector<Tensor>{
      reel::concat({b->cams, b->X, reel::expand_dims(b->w, 1)}, 1), b->feat});
  return {[=] {
            *blocks = fn(*inputs).at(1);
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
                vals.push_back(blocks->data<double>()[2 * k + r]);  // observation 0
              }
            cols.push_back(11 * b->n + 3 * b->m + b->p - 1);
            vals.push_back(werr->values().at(static_cast<std::size_t>(b->p - 1)));
            return json{{"rows", rows}, {"cols", cols}, {"vals", vals}};
          }};
}

}  // namespace

Functions ba_functions() { return {{"objective", ba_objective}, {"jacobian", ba_jacobian}}; }

}  // namespace gradbench::evals
