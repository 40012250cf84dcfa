#pragma once
// Random tapes for the fuzzers (tests/test_fuzz.cpp runs them compiled against
// interpreted; tests/test_fuzz_text.cpp mutates their text): a few inputs, then
// operations drawn from every structure the compiler lowers, with attributes drawn at
// their edges too (negative and out-of-range axes, zero and huge steps, strides,
// dilations, padding), where an invalid choice must be a reel::Error when the call is
// built; and loops (scan, with or without a checkpoint policy, and while_loop) whose
// bodies are random tapes of the same kind, which may hold one more level of loops.
#include <limits>
#include <random>

#include <doctest/doctest.h>
#include <reel/reel.hpp>

namespace reel::test {

class RandomTape {
 public:
  // loops: whether scan and while_loop calls are drawn.
  explicit RandomTape(uint64_t seed, bool loops = true) : rng_(seed), depth_(loops ? 0 : kLoopDepth) {}

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

  // Calls with attributes at their edges: built, and refused with a reel::Error.
  int edge_calls() const { return edge_calls_; }
  int edge_errors() const { return edge_errors_; }
  // Loop calls drawn (bodies' included), and of them nested in a body.
  int loops() const { return loops_; }
  int nested_loops() const { return nested_loops_; }

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
      switch (pick(0, depth_ < kLoopDepth ? 18 : 17)) {
        case 18: v = add_loop(dtype); break;
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
        case 17: {  // attributes at their edges: a valid call must run the same compiled,
                    // an invalid one must be a reel::Error here, when it is built
          const auto rank = static_cast<int64_t>(sx.size());
          constexpr int64_t kBig = std::numeric_limits<int64_t>::max(), kSmall = std::numeric_limits<int64_t>::min();
          auto axis = [&] {
            const int64_t c[] = {-rank - 1, -rank, -1, 0, rank - 1, rank, kSmall, kBig};
            return c[pick(0, 7)];
          };
          auto step = [&] {
            const int64_t c[] = {0, -1, 1, 2, 3, kBig};
            return c[pick(0, 5)];
          };
          auto window = [&] {
            const int64_t c[] = {0, 1, 2, 3, kBig};
            return c[pick(0, 4)];
          };
          try {
            switch (pick(0, 6)) {
              case 0: {
                static const char* reduce[] = {"sum", "max", "min", "prod", "mean"};
                v = b_.call(reduce[pick(0, 4)], {x}, {{"axes", Shape{axis()}}, {"keepdims", pick(0, 1) == 1}});
                break;
              }
              case 1:
                v = b_.call("slice", {x}, {{"axis", axis()}, {"start", int64_t{pick(0, 1)}}, {"stop", int64_t{pick(1, 3)}},
                                           {"step", step()}});
                break;
              case 2:
                v = b_.call("unslice", {x}, {{"axis", axis()}, {"start", int64_t{pick(0, 2)}}, {"step", step()},
                                             {"size", int64_t{pick(0, 9)}}});
                break;
              case 3: {
                Tensor idx(DType::i64, {2});
                idx.mutable_data<int64_t>()[0] = 1, idx.mutable_data<int64_t>()[1] = 0;
                const Var i = b_.constant(idx);
                const int64_t a = axis();
                // Indices 1 and 0 need an axis of length 2 (out-of-range indices are run-time errors).
                if (a >= -rank && a < rank && sx[static_cast<std::size_t>(a < 0 ? a + rank : a)] < 2) continue;
                if (pick(0, 1)) {
                  v = b_.call("gather", {x, i}, {{"axis", a}});
                } else {  // scatter_add of x's own gathered values, at the same axis
                  const Var g = b_.call("gather", {x, i}, {{"axis", a}});
                  v = b_.call("scatter_add", {x, i, b_.call("cos", {g})}, {{"axis", a}});
                }
                break;
              }
              case 4: v = b_.call("concat", {x, y}, {{"axis", axis()}}); break;
              case 5: case 6: {  // conv2d and the pools on x as a [1,1,H,W] image
                if (sx.size() != 2) continue;
                const Var img = b_.reshape(x, {1, 1, sx[0], sx[1]});
                const Shape stride{window(), window()}, padding{window() / 2, window() / 2};
                switch (pick(0, 2)) {
                  case 0: {
                    const Var w = b_.constant(tensor({0.5, -0.25, 0.75, 0.1}, {1, 1, 2, 2}, b_.type(x).dtype));
                    v = b_.call("conv2d", {img, w}, {{"stride", stride}, {"padding", padding},
                                                     {"dilation", Shape{window(), window()}}});
                    break;
                  }
                  case 1: v = b_.call("max_pool2d", {img}, {{"kernel", Shape{window(), window()}}, {"stride", stride}}); break;
                  default:
                    v = b_.call("avg_pool2d", {img}, {{"kernel", Shape{window(), window()}}, {"stride", stride},
                                                      {"padding", padding}});
                }
                const Shape s = b_.type(v).shape;
                v = b_.reshape(v, {s[2], s[3]});
                break;
              }
            }
          } catch (const Error&) {
            ++edge_errors_;
            continue;
          }
          ++edge_calls_;
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

  // A scan or a while_loop on some of the values so far (consts, carries, a scan's xs)
  // whose body is a random tape; its results join the values, the last is returned.
  // Carries are mostly mixed as c/2 + tanh(...)/2, so they stay bounded however long the
  // loop; some are passed on as they are, some replaced by a value of another input.
  // A while_loop's first carry counts its iterations; its cond reads the carries but
  // holds for the first N iterations exactly, and the call records trips=N.
  Var add_loop(DType dtype) {
    const bool is_scan = pick(0, 1) == 0;
    std::vector<Var> consts, carries, xs;
    for (int i = pick(0, 2); i > 0; --i) consts.push_back(any());
    if (!is_scan) carries.push_back(b_.scalar(0.0, dtype));
    for (int i = pick(1, 2); i > 0; --i) carries.push_back(any());
    int64_t length = pick(0, 3);
    if (is_scan && pick(0, 2) > 0) {
      for (int attempt = 0; attempt < 5 && xs.empty(); ++attempt)
        if (const Var x = any(); !shape(x).empty() && shape(x)[0] > 0) xs.push_back(x);
      for (int attempt = 0; attempt < 3 && !xs.empty(); ++attempt)
        if (const Var x = any(); !shape(x).empty() && shape(x)[0] == shape(xs[0])[0]) xs.push_back(x);
      if (!xs.empty()) length = shape(xs[0])[0];
    }
    const bool index = is_scan && pick(0, 2) == 0;
    // The body: [counter], consts, carries, slices of xs.
    RandomTape body(rng_(), depth_ + 1);
    const Var counter = index ? body.b_.input({DType::i64, {}}) : kNoVar;
    std::vector<Var> in;
    for (Var v : consts) in.push_back(body.add_input(b_.type(v)));
    for (Var v : carries) in.push_back(body.add_input(b_.type(v)));
    for (Var v : xs) in.push_back(body.add_input({dtype, Shape(shape(v).begin() + 1, shape(v).end())}));
    if (index) body.vars_.push_back(body.b_.call("cast", {counter}, {{"dtype", dtype}}));
    for (int i = pick(1, 6); i > 0; --i) body.add_op(dtype);
    std::vector<Var> outs;
    const std::size_t first_carry = consts.size();
    for (std::size_t c = 0; c < carries.size(); ++c) {
      const Var carry = in[first_carry + c];
      if (!is_scan && c == 0) {
        outs.push_back(body.b_.add(carry, body.b_.scalar(1.0, dtype)));
        continue;
      }
      // Mostly a mix of the carry and another value; sometimes the carry as it is, or a
      // value that does not read it.
      const int how = pick(0, 5);
      const Var mix = body.b_.call("tanh", {body.fit(how == 4 ? in[0] : body.any(), b_.type(carries[c]).shape)});
      outs.push_back(how == 5 ? carry : how == 4 ? mix : body.b_.add(body.b_.mul(carry, 0.5), body.b_.mul(mix, 0.5)));
    }
    for (int i = is_scan && length > 0 ? pick(0, 2) : 0; i > 0; --i) outs.push_back(body.any());
    body.b_.set_outputs(outs);
    loops_ += body.loops_ + 1, nested_loops_ += body.loops_;
    edge_calls_ += body.edge_calls_, edge_errors_ += body.edge_errors_;
    std::vector<Var> args = consts;
    args.insert(args.end(), carries.begin(), carries.end());
    args.insert(args.end(), xs.begin(), xs.end());
    Attrs attrs{{"body", TapeRef{std::make_shared<const Tape>(body.b_.finish())}},
                {"num_consts", static_cast<int64_t>(consts.size())}};
    if (is_scan) {
      attrs.set("length", length);
      attrs.set("num_carry", static_cast<int64_t>(carries.size()));
      if (pick(0, 1)) attrs.set("reverse", true);
      if (index) attrs.set("index", int64_t{pick(-2, 2)});
      switch (pick(0, 5)) {  // how reverse mode keeps the residuals (default: all of them)
        case 0: attrs.set("checkpoint", std::string("every")), attrs.set("checkpoint_arg", int64_t{pick(1, 3)}); break;
        case 1: attrs.set("checkpoint", std::string("sqrt")); break;
        case 2: attrs.set("checkpoint", std::string("binomial")), attrs.set("checkpoint_arg", int64_t{pick(1, 3)}); break;
        default: break;
      }
    } else {
      // cond: counter + tanh(sum(a carry)) / 4 < N - 1/2, true for counter = 0 .. N-1.
      const int64_t trips = pick(0, 3);
      TapeBuilder cond;
      std::vector<Var> cin;
      for (Var v : args) cin.push_back(cond.input(b_.type(v)));
      const Var wobble = cond.mul(cond.call("tanh", {cond.call("sum", {cin[first_carry + 1]})}), 0.25);
      cond.set_outputs({cond.call("lt", {cond.add(cin[first_carry], wobble),
                                         cond.scalar(static_cast<double>(trips) - 0.5, dtype)})});
      attrs.set("cond", TapeRef{std::make_shared<const Tape>(cond.finish())});
      attrs.set("trips", trips);
    }
    const std::vector<Var> results = b_.call_results(primitive(is_scan ? "scan" : "while_loop"), args, attrs);
    vars_.insert(vars_.end(), results.begin(), results.end() - 1);
    return results.back();
  }

  Var add_input(const VarType& type) {
    vars_.push_back(b_.input(type));
    return vars_.back();
  }

  // v broadcast to shape s, summed first where it does not broadcast.
  Var fit(Var v, const Shape& s) {
    if (!broadcastable_to(shape(v), s)) v = b_.call("sum", {v});
    return b_.broadcast_to(v, s);
  }

  static bool broadcastable(const Shape& a, const Shape& b) {
    try {
      broadcast_shapes(a, b, "fuzz");
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  // A body's generator: `depth` loops deep (loops are drawn while depth < kLoopDepth).
  RandomTape(uint64_t seed, int depth) : rng_(seed), depth_(depth) {}
  static constexpr int kLoopDepth = 2;

  std::mt19937_64 rng_;
  int depth_ = 0;
  int edge_calls_ = 0, edge_errors_ = 0, loops_ = 0, nested_loops_ = 0;
  TapeBuilder b_;
  std::vector<Var> vars_;
};

// A scalar of every output, so the tape can be differentiated.
inline Tape scalarised(const Tape& t) {
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

}  // namespace reel::test
