// A small differential fuzzer: random tapes (and their gradient tapes) must give the
// same results compiled as interpreted. Deterministic seeds, so a failure reproduces.
#include <cstdlib>
#include <cmath>
#include <random>

#include "test_util.hpp"

using namespace reel;

namespace {

class RandomTape {
 public:
  explicit RandomTape(uint64_t seed) : rng_(seed) {}

  Tape make(DType dtype) {
    const std::vector<Shape> input_shapes{{3, 4}, {4}, {3, 1}, {}, {4, 3}, {1, 4}};
    const int inputs = pick(2, 4);
    for (int i = 0; i < inputs; ++i) vars_.push_back(b_.input({dtype, input_shapes[pick(0, 5)]}));
    const int ops = pick(3, 14);
    for (int i = 0; i < ops; ++i) add_op(dtype);
    // Outputs: the last value, plus a few others (inputs and repeats included).
    std::vector<Var> outs{vars_.back()};
    for (int i = pick(0, 3); i > 0; --i) outs.push_back(vars_[pick(0, static_cast<int>(vars_.size()) - 1)]);
    b_.set_outputs(outs);
    return b_.finish();
  }

  std::vector<Tensor> args(const Tape& t) {
    std::vector<Tensor> a;
    for (const VarType& type : t.input_types()) a.push_back(randn(type.shape, rng_(), type.dtype));
    return a;
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  Var any() { return vars_[pick(0, static_cast<int>(vars_.size()) - 1)]; }
  const Shape& shape(Var v) { return b_.type(v).shape; }

  void add_op(DType dtype) {
    for (int attempt = 0; attempt < 20; ++attempt) {
      const Var x = any(), y = any();
      const Shape sx = shape(x), sy = shape(y);
      Var v = kNoVar;
      switch (pick(0, 16)) {
        case 0: case 1: {  // unary ops that keep values finite and moderate
          static const char* unary[] = {"neg", "sin", "cos", "tanh", "sigmoid", "square", "erf", "softplus", "relu", "abs"};
          v = b_.call(unary[pick(0, 9)], {x});
          break;
        }
        case 12: {  // maximum, minimum, or a where on a comparison (kinks where values tie, as by convention)
          if (!broadcastable(sx, sy)) continue;
          static const char* pick2[] = {"maximum", "minimum", "where"};
          const char* op = pick2[pick(0, 2)];
          if (std::string(op) == "where") {
            v = b_.call("where", {b_.call(pick(0, 1) ? "gt" : "le", {x, b_.scalar(0.1, b_.type(x).dtype)}), x, y});
          } else {
            v = b_.call(op, {x, y});
          }
          break;
        }
        case 13: v = b_.call("clamp", {x}, {{"lo", -0.5}, {"hi", 0.75}}); break;
        case 15: {  // layout: a slice, a permutation, a concat with itself, a gather (duplicates)
          if (sx.empty() || sx[0] < 2) continue;
          switch (pick(0, 3)) {
            case 0: v = b_.call("slice", {x}, {{"axis", int64_t{0}}, {"start", int64_t{1}}, {"stop", sx[0]}, {"step", int64_t{1}}}); break;
            case 1: {
              Shape perm;
              for (int64_t d = static_cast<int64_t>(sx.size()); d-- > 0;) perm.push_back(d);
              v = b_.call("permute", {x}, {{"perm", perm}});
              break;
            }
            case 2: v = b_.call("concat", {x, x}, {{"axis", int64_t{0}}}); break;
            default: {
              Tensor idx(DType::i64, {3});
              idx.mutable_data<int64_t>()[0] = 1, idx.mutable_data<int64_t>()[1] = 0, idx.mutable_data<int64_t>()[2] = 1;
              v = b_.call("gather", {x, b_.constant(idx)}, {{"axis", int64_t{0}}});
            }
          }
          break;
        }
        case 16: {  // 2-D through the NCHW operations, scatter_add, index_update, log_softmax
          if (sx.size() != 2 || sx[0] < 2 || sx[1] < 2) continue;
          const DType dt = b_.type(x).dtype;
          const Var img = b_.reshape(x, {1, 1, sx[0], sx[1]});
          switch (pick(0, 5)) {
            case 0: {
              const Var w = b_.constant(tensor({0.5, -0.25, 0.75, 0.1}, {1, 1, 2, 2}, dt));
              v = b_.call("conv2d", {img, w}, {{"padding", Shape{1, 0}}});
              break;
            }
            case 1: v = b_.call("max_pool2d", {img}, {{"kernel", Shape{2, 2}}, {"stride", Shape{1, 1}}}); break;
            case 2: v = b_.call("avg_pool2d", {img}, {{"kernel", Shape{2, 1}}, {"padding", Shape{1, 0}}}); break;
            case 3: {
              Tensor idx(DType::i64, {3});
              idx.mutable_data<int64_t>()[0] = 1, idx.mutable_data<int64_t>()[1] = 0, idx.mutable_data<int64_t>()[2] = 1;
              const Var vals = b_.call("gather", {x, b_.constant(idx)}, {{"axis", int64_t{1}}});
              v = b_.call("scatter_add", {x, b_.constant(idx), b_.call("sin", {vals})}, {{"axis", int64_t{1}}});
              break;
            }
            case 4: {
              Tensor idx(DType::i64, {1});
              idx.mutable_data<int64_t>()[0] = sx[0] - 1;
              const Var row = b_.call("slice", {x}, {{"axis", int64_t{0}}, {"start", int64_t{0}}, {"stop", int64_t{1}}, {"step", int64_t{1}}});
              v = b_.call("index_update", {x, b_.constant(idx), b_.call("cos", {row})}, {{"axis", int64_t{0}}});
              break;
            }
            default: {  // log_softmax over axis 1, max-shifted as reel::log_softmax writes it
              const Attrs keep{{"axes", Shape{1}}, {"keepdims", true}};
              const Var m = b_.call("nodiff", {b_.call("max", {x}, keep)});
              const Var shifted = b_.sub(x, m);
              v = b_.sub(shifted, b_.call("log", {b_.call("sum", {b_.call("exp", {shifted})}, keep)}));
            }
          }
          if (b_.type(v).shape.size() == 4) {  // back to 2-D
            const Shape s = b_.type(v).shape;
            v = b_.reshape(v, {s[2], s[3]});
          }
          break;
        }
        case 14: {  // max, min or prod over all axes or one, with or without keepdims
          static const char* reduce[] = {"max", "min", "prod"};
          Attrs attrs;
          if (!sx.empty() && pick(0, 1)) attrs.set("axes", Shape{pick(0, static_cast<int>(sx.size()) - 1)});
          if (pick(0, 1)) attrs.set("keepdims", true);
          if (numel(sx) == 0) continue;
          v = b_.call(reduce[pick(0, 2)], {x}, attrs);
          break;
        }
        case 2: case 3: case 4: {
          if (!broadcastable(sx, sy)) continue;
          static const char* binary[] = {"add", "sub", "mul"};
          v = b_.call(binary[pick(0, 2)], {x, y});
          break;
        }
        case 5: v = b_.call("sum", {x}); break;
        case 6:
          if (sx.empty()) continue;
          v = b_.call("sum", {x}, {{"axis", static_cast<int64_t>(pick(0, static_cast<int>(sx.size()) - 1))}});
          break;
        case 7: v = b_.call("mean", {x}); break;
        case 8:
          if (sx.size() != 2) continue;
          v = pick(0, 1) ? b_.call("transpose", {x}) : b_.call("reshape", {x}, {{"shape", Shape{sx[1], sx[0]}}});
          break;
        case 9: {
          if (sx.size() != 2 || sy.empty() || sy.size() > 2 || sx[1] != sy[0]) continue;
          v = b_.matmul(x, y);
          break;
        }
        case 10: {
          if (!broadcastable_to(sx, {3, 4})) continue;
          v = b_.call("broadcast_to", {x}, {{"shape", Shape{3, 4}}});
          break;
        }
        case 11: v = b_.mul(x, pick(0, 1) ? 0.5 : -2.0); break;
      }
      (void)dtype;
      vars_.push_back(v);
      return;
    }
  }

  static bool broadcastable(const Shape& a, const Shape& b) {
    try {
      broadcast_shapes(a, b, "fuzz");
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  std::mt19937_64 rng_;
  TapeBuilder b_;
  std::vector<Var> vars_;
};

// A scalar of every output, so the tape can be differentiated.
Tape scalarised(const Tape& t) {
  TapeBuilder b;
  std::vector<Var> map(t.size() + 1);
  for (Var v = 1; v <= t.size(); ++v) {
    std::vector<Var> args;
    for (Var a : t.op(v).args) args.push_back(map[a]);
    map[v] = b.copy(t.op(v), args);
  }
  Var total = kNoVar;
  for (Var o : t.outputs) {
    const Var s = b.call("sum", {b.call("sin", {map[o]})});
    total = total == kNoVar ? s : b.add(total, s);
  }
  b.set_outputs({total});
  return b.finish();
}

}  // namespace

TEST_CASE("fuzz: random tapes and their gradients run the same compiled and interpreted") {
  // REEL_FUZZ_SEEDS=N runs more seeds (CI runs 150).
  const char* env = std::getenv("REEL_FUZZ_SEEDS");
  const uint64_t seeds = env ? std::strtoull(env, nullptr, 10) : 150;
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    CAPTURE(seed);
    RandomTape gen(seed);
    const DType dtype = seed % 4 == 0 ? DType::f32 : DType::f64;
    const Tape t = gen.make(dtype);
    CAPTURE(to_string(t));
    const std::vector<Tensor> args = gen.args(t);
    test::run_checked(t, args);
    const Tape s = scalarised(t);
    const Tape g = grad_tape(s);
    const auto reused = test::run_checked(g, args);
    // Forward mode agrees with reverse mode: <grad, u> = J u, for a random direction u.
    std::vector<Tensor> with_tangents = args;
    double dot = 0;
    for (std::size_t i = 0; i < args.size(); ++i) {
      const Tensor u = randn(args[i].shape(), 1000 + seed + i, args[i].dtype());
      with_tangents.push_back(u);
      dot += sum(reused[1 + i] * u).item();
    }
    const auto forward = test::run_checked(jvp_tape(s), with_tangents);
    const double tol = dtype == DType::f64 ? 1e-9 : 1e-3;
    CHECK_MESSAGE(std::abs(forward[1].item() - dot) <= tol * (1 + std::abs(dot)), "jvp ", forward[1].item(),
                  " vs <grad, u> ", dot);
    // And against central finite differences along u (f64 only: f32 has too few digits).
    if (dtype == DType::f64) {
      const double h = 1e-6;
      std::vector<Tensor> plus = args, minus = args;
      for (std::size_t i = 0; i < args.size(); ++i) {
        plus[i] = args[i] + with_tangents[args.size() + i] * h;
        minus[i] = args[i] - with_tangents[args.size() + i] * h;
      }
      const double fd = (play(s, plus)[0].item() - play(s, minus)[0].item()) / (2 * h);
      CHECK_MESSAGE(std::abs(forward[1].item() - fd) <= 1e-5 * (1 + std::abs(fd)), "jvp ", forward[1].item(),
                    " vs finite differences ", fd);
    }
    // Buffer reuse and in-place updates change no result: the same tape compiled with
    // every buffer separate agrees.
    const auto separate = compile(g, {.reuse_memory = false})(args);
    for (std::size_t k = 0; k < separate.size(); ++k) {
      const test::Tolerance tol = test::compiled_tolerance(separate[k].dtype());
      test::check_close(separate[k], reused[k], tol.rtol, tol.atol, fmt::format("reuse off: output {}", k));
    }
  }
}
