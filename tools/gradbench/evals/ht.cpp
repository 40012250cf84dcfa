// GradBench's ht: the hand-tracking residuals and their Jacobian (vector-mode forward).
#include "evals.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace gradbench::evals {

namespace {

// The hand model of GradBench's ht eval (gradbench: cpp/gradbench/evals/ht.hpp): theta
// [26] -> pose parameters -> per-bone transforms -> linear-blend skinning of the
// model's vertices -> the residuals against the data points, at vertices
// (correspondences) or at points on triangles given by barycentric us.
struct HandModel {
  std::vector<int64_t> parents;
  std::vector<Tensor> base_relatives, inverse_base_absolutes;  // [4, 4] each
  Tensor positions;                                            // [4, V]
  Tensor weights;                                              // [bones, V]
  Tensor skin;  // [4 bones, V]: row 4b + j, column v = weights[b, v] positions[j, v]
  bool mirrored = false;
  Tensor corr_a, corr_b, corr_c;  // i64 [c]: vertex indices (a only, without us)
  Tensor points;                  // [3, c]
  bool complicated = false;
};

Tensor matrix3(const std::vector<Tensor>& nine) { return reel::reshape(reel::stack(nine), {3, 3}); }

// R = Rz Ry Rx from the angles (x, z, y), as the reference.
Tensor euler_to_rotation(const Tensor& xzy) {
  const Tensor tx = reel::index(xzy, 0), ty = reel::index(xzy, 2), tz = reel::index(xzy, 1);
  const Tensor one = reel::scalar(1.0), zero = reel::scalar(0.0);
  const Tensor Rx = matrix3({one, zero, zero, zero, reel::cos(tx), -reel::sin(tx), zero, reel::sin(tx), reel::cos(tx)});
  const Tensor Ry = matrix3({reel::cos(ty), zero, reel::sin(ty), zero, one, zero, -reel::sin(ty), zero, reel::cos(ty)});
  const Tensor Rz = matrix3({reel::cos(tz), -reel::sin(tz), zero, reel::sin(tz), reel::cos(tz), zero, zero, zero, one});
  return reel::matmul(reel::matmul(Rz, Ry), Rx);
}

Tensor angle_axis_to_rotation(const Tensor& aa) {
  const Tensor norm = reel::sqrt(reel::sum(reel::square(aa)));
  if (norm < 0.0001) return reel::tensor({1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3});  // (a guard while traced)
  const Tensor x = reel::index(aa, 0) / norm, y = reel::index(aa, 1) / norm, z = reel::index(aa, 2) / norm;
  const Tensor s = reel::sin(norm), c = reel::cos(norm);
  return matrix3({x * x + (1.0 - x * x) * c, x * y * (1.0 - c) - z * s, x * z * (1.0 - c) + y * s,
                  x * y * (1.0 - c) + z * s, y * y + (1.0 - y * y) * c, y * z * (1.0 - c) - x * s,
                  x * z * (1.0 - c) - y * s, z * y * (1.0 - c) + x * s, z * z + (1.0 - z * z) * c});
}

// Residuals [3c] (3i + j: point i, coordinate j).
Tensor hand_residuals(const HandModel& model, const Tensor& theta, const Tensor& us) {
  const auto bones = static_cast<int64_t>(model.parents.size());
  const Tensor zero3 = reel::zeros({3});
  auto th = [&](int64_t i) { return reel::index(theta, i); };
  // Pose parameters, column by column: global rotation, scale (1), translation, then
  // per bone (x, z, y) angles; fingers take 4 values on their first joint's x and y,
  // then x on the next two (the reference's to_pose_params).
  std::vector<Tensor> pose(static_cast<std::size_t>(bones + 3), zero3);
  pose[0] = reel::slice(theta, 0, 3);
  pose[1] = reel::ones({3});
  pose[2] = reel::slice(theta, 3, 6);
  int64_t it = 6, ip = 5;
  const Tensor zero = reel::scalar(0.0);
  for (int finger = 0; finger < 5; ++finger) {
    for (int i = 2; i <= 4; ++i) {
      const Tensor a = th(it++);
      const Tensor b = i == 2 ? th(it++) : zero;
      pose[static_cast<std::size_t>(ip++)] = reel::stack({a, b, zero});
    }
    ++ip;
  }
  // Bone transforms.
  const Tensor bottom = reel::tensor({0, 0, 0, 1}, {1, 4});
  std::vector<Tensor> absolutes(static_cast<std::size_t>(bones)), transforms;
  for (int64_t i = 0; i < bones; ++i) {
    const Tensor R = euler_to_rotation(pose[static_cast<std::size_t>(i + 3)]);
    const Tensor tr = reel::concat({reel::concat({R, reel::zeros({3, 1})}, 1), bottom}, 0);
    const Tensor relative = reel::matmul(model.base_relatives[static_cast<std::size_t>(i)], tr);
    const int64_t parent = model.parents[static_cast<std::size_t>(i)];
    absolutes[static_cast<std::size_t>(i)] =
        parent < 0 ? relative : reel::matmul(absolutes[static_cast<std::size_t>(parent)], relative);
    transforms.push_back(reel::slice(
        reel::matmul(absolutes[static_cast<std::size_t>(i)], model.inverse_base_absolutes[static_cast<std::size_t>(i)]), 0, 0,
        3));
  }
  // Skinning: sum over bones of (transform x base positions) weighted per vertex, as one
  // product [3, 4 bones] x [4 bones, V] (model.skin: the weighted base positions).
  Tensor positions = reel::matmul(reel::concat(transforms, 1), model.skin);  // [3, V]
  if (model.mirrored) positions = positions * reel::tensor({-1, 1, 1}, {3, 1});
  // Global transform: rotation (columns scaled by pose[1], ones), then translation.
  const Tensor R = angle_axis_to_rotation(pose[0]) * reel::expand_dims(pose[1], 0);
  positions = reel::matmul(R, positions) + reel::expand_dims(pose[2], 1);
  Tensor at;  // [3, c]
  if (model.complicated) {
    const Tensor u0 = reel::slice(us, 1, 0, 1), u1 = reel::slice(us, 1, 1, 2);  // [c, 1]
    const Tensor Va = reel::transpose(reel::gather(positions, model.corr_a, 1));  // [c, 3]
    const Tensor Vb = reel::transpose(reel::gather(positions, model.corr_b, 1));
    const Tensor Vc = reel::transpose(reel::gather(positions, model.corr_c, 1));
    at = reel::transpose(u0 * Va + u1 * Vb + (1.0 - u0 - u1) * Vc);
  } else {
    at = reel::gather(positions, model.corr_a, 1);
  }
  return reel::reshape(reel::transpose(model.points - at), {model.points.numel()});
}

std::vector<std::vector<double>> rows_of(const json& v, const char* name, std::size_t cols) {
  if (!v.is_array()) throw reel::Error(fmt::format("ht: expected {} to be an array", name));
  std::vector<std::vector<double>> out;
  for (const json& r : v) {
    if (!r.is_array() || (cols != 0 && r.size() != cols) ||
        !std::all_of(r.begin(), r.end(), [](const json& e) { return e.is_number(); }))
      throw reel::Error(fmt::format("ht: expected {} to hold rows of {} numbers", name, cols));
    out.push_back(r.get<std::vector<double>>());
  }
  return out;
}

Tensor from_rows(const std::vector<std::vector<double>>& rows, std::size_t cols, bool transposed) {
  std::vector<double> flat;
  const auto n = static_cast<int64_t>(rows.size()), k = static_cast<int64_t>(cols);
  if (!transposed) {
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    return reel::tensor(flat, {n, k});
  }
  flat.resize(rows.size() * cols);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) flat[static_cast<std::size_t>(j * n + i)] = rows[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
  return reel::tensor(flat, {k, n});
}

struct HtInput {
  HandModel model;
  Tensor theta, us;
  int64_t c = 0;
};
std::shared_ptr<HtInput> ht_input(const json& input) {
  auto in = std::make_shared<HtInput>();
  in->theta = input_tensor(input, "theta");
  if (in->theta.numel() != 26) throw reel::Error("ht: expected theta with 26 values");
  const json& data = field(input, "data");
  const json& model = field(data, "model");
  HandModel& m = in->model;
  constexpr int64_t bones = 22;
  // bone_count, parents (each before its bone, -1 for the root) and the arrays of 22.
  if (const int64_t count = integer(model, "ht", "bone_count", 0); count != bones)
    throw reel::Error(fmt::format("ht: expected the hand model's {} bones, got \"bone_count\" {}", bones, count));
  m.parents = integers(field(model, "parents"), "ht", "\"parents\"", -1, bones - 2);
  if (static_cast<int64_t>(m.parents.size()) != bones)
    throw reel::Error(fmt::format("ht: \"bone_count\" is {} but \"parents\" has {}", bones, m.parents.size()));
  for (std::size_t i = 0; i < m.parents.size(); ++i)
    if (m.parents[i] >= static_cast<int64_t>(i))
      throw reel::Error(fmt::format("ht: \"parents\"[{}] is {}: a bone's parent must come before it", i, m.parents[i]));
  for (const char* name : {"base_relatives", "inverse_base_absolutes"}) {
    const json& mats = field(model, name);
    if (!mats.is_array() || mats.size() != bones) throw reel::Error(fmt::format("ht: expected {} 4x4 {}", bones, name));
    for (const json& mat : mats)
      (std::string(name) == "base_relatives" ? m.base_relatives : m.inverse_base_absolutes)
          .push_back(from_rows(rows_of(mat, name, 4), 4, false));
  }
  m.positions = from_rows(rows_of(field(model, "base_positions"), "base_positions", 4), 4, true);  // [4, V]
  m.weights = from_rows(rows_of(field(model, "weights"), "weights", bones), bones, true);        // [bones, V]
  if (m.weights.shape()[1] != m.positions.shape()[1]) throw reel::Error("ht: expected one weights row per vertex");
  {
    const int64_t V = m.positions.shape()[1];
    m.skin = reel::zeros({4 * bones, V});
    double* skin = m.skin.mutable_data<double>();
    const double *w = m.weights.data<double>(), *pos = m.positions.data<double>();
    for (int64_t b = 0; b < bones; ++b)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t v = 0; v < V; ++v) skin[(4 * b + j) * V + v] = w[b * V + v] * pos[j * V + v];
  }
  const json& mirrored = field(model, "is_mirrored");
  if (!mirrored.is_boolean()) throw reel::Error(fmt::format("ht: \"is_mirrored\" must be true or false, got {}", mirrored.dump()));
  m.mirrored = mirrored.get<bool>();
  const int64_t V = m.positions.shape()[1];
  const json& us = field(input, "us");
  m.complicated = us.is_array() && !us.empty();
  // Vertex indices, or (with us) triangle indices whose corners are vertex indices.
  std::vector<std::vector<int64_t>> tris;
  if (m.complicated) {
    const json& t = field(model, "triangles");
    if (!t.is_array()) throw reel::Error(fmt::format("ht: \"triangles\" must be an array, got {}", t.dump()));
    for (std::size_t i = 0; i < t.size(); ++i) {
      const std::string what = fmt::format("\"triangles\"[{}]", i);
      tris.push_back(integers(t[i], "ht", what, 0, V - 1));
      if (tris.back().size() != 3) throw reel::Error(fmt::format("ht: {} must hold 3 vertex indices", what));
    }
  }
  const auto corr = integers(field(data, "correspondences"), "ht", "\"correspondences\"", 0,
                             m.complicated ? static_cast<int64_t>(tris.size()) - 1 : V - 1);
  in->c = static_cast<int64_t>(corr.size());
  m.points = from_rows(rows_of(field(data, "points"), "points", 3), 3, true);  // [3, c]
  if (m.points.shape()[1] != in->c) throw reel::Error("ht: expected one point per correspondence");
  auto index_tensor = [&](const std::vector<int64_t>& v) {
    Tensor t(reel::DType::i64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.mutable_data<int64_t>());
    return t;
  };
  if (m.complicated) {
    std::vector<int64_t> a, b, cc;
    for (int64_t t : corr) {
      a.push_back(tris[static_cast<std::size_t>(t)][0]);
      b.push_back(tris[static_cast<std::size_t>(t)][1]);
      cc.push_back(tris[static_cast<std::size_t>(t)][2]);
    }
    m.corr_a = index_tensor(a), m.corr_b = index_tensor(b), m.corr_c = index_tensor(cc);
    in->us = from_rows(rows_of(us, "us", 2), 2, false);
    if (in->us.shape()[0] != in->c) throw reel::Error("ht: expected one us row per correspondence");
  } else {
    m.corr_a = index_tensor(corr);
    in->us = reel::zeros({in->c, 2});
  }
  return in;
}

Prepared ht_objective(const json& input) {
  auto in = ht_input(input);
  auto f = std::make_shared<reel::CompiledFunction>(reel::compile(
      reel::trace([m = &in->model](const Tensor& theta, const Tensor& us) { return hand_residuals(*m, theta, us); },
                  in->theta, in->us),
      kJitOptions.compile));
  return each_run([=] { return (*f)({in->theta, in->us}).at(0); }, vector_json);
}

// The Jacobian by vector-mode forward: all its columns in one pass (jvp_tape(tape, k)),
// one per theta entry and, with us, two more with every point's u_0 (u_1) tangent 1
// (each residual depends on its own point's us only, so those two columns hold the us
// part of the Jacobian, compressed).
Prepared ht_jacobian(const json& input) {
  auto in = ht_input(input);
  const int64_t extra = in->model.complicated ? 2 : 0, cols = 26 + extra;
  auto f = std::make_shared<reel::CompiledFunction>(reel::compile(reel::jvp_tape(
      reel::trace([m = &in->model](const Tensor& theta, const Tensor& us) { return hand_residuals(*m, theta, us); },
                  in->theta, in->us),
      cols),
      kJitOptions.compile));
  // The k tangents of theta [cols, 26] and us [cols, c, 2], made before the timed runs.
  Tensor tt = reel::zeros({cols, 26}), tu = reel::zeros({cols, in->c, 2});
  for (int64_t k = 0; k < cols; ++k) {
    if (k < extra) {
      for (int64_t i = 0; i < in->c; ++i) tu.mutable_data<double>()[(k * in->c + i) * 2 + k] = 1.0;
    } else {
      tt.mutable_data<double>()[k * 26 + (k - extra)] = 1.0;
    }
  }
  auto inputs = std::make_shared<std::vector<Tensor>>(std::vector<Tensor>{in->theta, in->us, tt, tu});
  auto columns = std::make_shared<Tensor>();  // [cols, 3c]
  return {[=] { *columns = (*f)(*inputs).at(1); },
          [=] {
            const double* v = columns->data<double>();
            json rows = json::array();
            for (int64_t r = 0; r < 3 * in->c; ++r) {
              std::vector<double> row;
              for (int64_t k = 0; k < cols; ++k) row.push_back(v[k * 3 * in->c + r]);
              rows.push_back(row);
            }
            return rows;
          }};
}

}  // namespace

Functions ht_functions() { return {{"objective", ht_objective}, {"jacobian", ht_jacobian}}; }

}  // namespace gradbench::evals
