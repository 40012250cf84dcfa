// Batching rules of loops, calls and convolutions (vmap): scan, fori_loop, while_loop
// with per-element trip counts, checkpoint and call, revolve (vmap of a gradient through
// a binomial scan), conv2d, its gradients and the pools, and users' primitives
// (define_primitive's batch rule, define_function_primitive). Each batched tape is
// checked against a loop of the function over the batch's slices, interpreted and
// compiled (run_checked), and for not being the pass's fallback (a scan over the batch
// around one call) where a rule exists; also grad of vmap and vmap of grad.
#include <doctest/doctest.h>

#include "reel/ir/body_tape.hpp"
#include "test_util.hpp"

using namespace reel;
using reel::test::check_close;
using reel::test::Fn;
using reel::test::run_checked;

namespace {

// Top-level calls of `prim`.
int top_calls(const Tape& t, std::string_view prim) {
  int n = 0;
  for (const Op& op : t.ops) n += op.kind == OpKind::call && op.prim->name == prim;
  return n;
}

// Whether the tape (or a loop body in it) has the batch pass's fallback for `prim`: a
// scan whose body is one call of prim.
bool has_fallback(const Tape& t, std::string_view prim) {
  for (const Op& op : t.ops) {
    if (op.kind != OpKind::call) continue;
    for (const auto& [name, value] : op.attrs.items())
      if (const auto* ref = std::get_if<TapeRef>(&value)) {
        const Tape& body = *ref->tape;
        if (op.prim->name == "scan" && body.count(OpKind::call) == 1)
          for (const Op& inner : body.ops)
            if (inner.kind == OpKind::call && inner.prim->name == prim) return true;
        if (has_fallback(body, prim)) return true;
      }
  }
  return false;
}

// fn traced on the first batch element, batched by vmap_tape (flags: which args are
// batched, on their leading axis), run interpreted and compiled; each output row j is
// checked against fn on the args' slices j. Returns the batched tape.
Tape check_vmap(const Fn& fn, const std::vector<Tensor>& args, const std::vector<bool>& batched,
                const std::string& what, double rtol = 1e-12, double atol = 1e-12) {
  int64_t size = -1;
  std::vector<Tensor> first;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (batched[i]) size = args[i].shape()[0];
    first.push_back(batched[i] ? index(args[i], 0) : args[i]);
  }
  REQUIRE(size > 0);
  const Tape t = reel::test::trace_list(fn, first);
  const Tape v = vmap_tape(t, Flags(batched), size);
  INFO(what, ": ", to_string(t), "\nbatched: ", to_string(v));
  const std::vector<Tensor> out = run_checked(v, args);
  REQUIRE(out.size() == 1);
  for (int64_t j = 0; j < size; ++j) {
    std::vector<Tensor> slices;
    for (std::size_t i = 0; i < args.size(); ++i) slices.push_back(batched[i] ? index(args[i], j) : args[i]);
    check_close(index(out[0], j), fn(slices), rtol, atol, fmt::format("{}: batch element {}", what, j));
  }
  return v;
}

// Every non-empty subset of the args batched (size B: a batched arg gets [B] in front).
// `each` sees each batched tape with its mask (bit i: arg i batched).
void check_all_subsets(const Fn& fn, const std::vector<Tensor>& args, int64_t B, const std::string& what,
                       const std::function<void(unsigned, const Tape&)>& each = {}, uint64_t seed = 7) {
  const std::size_t n = args.size();
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    std::vector<Tensor> a;
    std::vector<bool> flags;
    for (std::size_t i = 0; i < n; ++i) {
      const bool b = (mask >> i) & 1u;
      flags.push_back(b);
      if (!b) {
        a.push_back(args[i]);
        continue;
      }
      Shape s{B};
      s.insert(s.end(), args[i].shape().begin(), args[i].shape().end());
      a.push_back(randn(s, seed + mask * 31 + i, args[i].dtype()));
    }
    const Tape v = check_vmap(fn, a, flags, fmt::format("{} (batched mask {})", what, mask));
    if (each) each(mask, v);
  }
}

// y_{t+1} = tanh(W y_t + x_t): the final carry and every y, flattened into one vector.
Tensor rnn(const Tensor& h0, const Tensor& xs, const Tensor& W) {
  auto [h, ys] = reel::scan(
      [&](const Tensor& h, const Tensor& x) {
        const Tensor next = tanh(matmul(W, h) + x);
        return std::pair{next, next * 2.0};
      },
      h0, xs);
  return concat({h, reshape(ys, {ys.numel()})});
}

}  // namespace

TEST_CASE("vmap of scan: every subset of carry, xs and consts batched, vs a loop, compiled too") {
  const Tensor h0 = randn({3}, 1), xs = randn({4, 3}, 2), W = randn({3, 3}, 3) * 0.5;
  const Fn f = [](const std::vector<Tensor>& a) { return rnn(a[0], a[1], a[2]); };
  check_all_subsets(f, {h0, xs, W}, 5, "rnn scan");
  // The rule's own scan, not the fallback's scan of scans: one scan, none nested.
  const Tape v = check_vmap(f, {randn({5, 3}, 4), xs, W}, {true, false, false}, "rnn scan, h0 batched");
  CHECK(!has_fallback(v, "scan"));
}

TEST_CASE("vmap of scan: a carry that becomes batched through another carry starts batched (the fixed point)") {
  // p' = q, q' = q + x: with only xs batched, q is batched from the first iteration and p
  // from the second: both must start batched.
  const Fn f = [](const std::vector<Tensor>& a) {
    auto [c, ys] = reel::scan(
        [](const std::pair<Tensor, Tensor>& pq, const Tensor& x) {
          return std::pair{std::pair{pq.second * 1.0, pq.second + sin(x)}, pq.first * 3.0};
        },
        std::pair{a[0], a[1]}, a[2]);
    return concat({c.first, c.second, reshape(ys, {ys.numel()})});
  };
  const Tensor p0 = randn({2}, 5), q0 = randn({2}, 6);
  const Tape v = check_vmap(f, {p0, q0, randn({3, 4, 2}, 7)}, {false, false, true}, "two-hop carries");
  CHECK(!has_fallback(v, "scan"));
  check_all_subsets(f, {p0, q0, randn({4, 2}, 8)}, 3, "two-hop carries");
}

TEST_CASE("vmap of scan: unbatched carries and ys stay unbatched in the loop; reverse scan and checkpointing") {
  // A counter carry that no batched value reaches, a y that depends on it only.
  const Fn f = [](const std::vector<Tensor>& a) {
    auto [c, ys] = reel::scan(
        [&](const std::pair<Tensor, Tensor>& nc, const Tensor& x) {
          return std::pair{std::pair{nc.first + 1.0, nc.second * 0.5 + x * a[1]}, nc.first * nc.first};
        },
        std::pair{a[0], a[1] * 0.0}, a[2], ScanOptions{.reverse = true, .checkpoint = Checkpoint::sqrt()});
    return concat({c.second, ys});
  };
  const Tensor n0 = tensor({0.0}, {}), w = randn({2}, 9), xs = randn({5, 2}, 10);
  const Tape v = check_vmap(f, {n0, randn({4, 2}, 11), xs}, {false, true, false}, "counter carry");
  // The counter's carry stays unbatched in the loop: its body input is f64[].
  int scans = 0;
  for (const Op& op : v.ops)
    if (op.kind == OpKind::call && op.prim->name == "scan" && op.attrs.integer("num_carry") == 2) {
      const Tape& body = op.attrs.tape("body");
      CHECK(body.type(body.inputs()[1]).shape.empty());
      ++scans;
    }
  CHECK(scans == 1);
  check_all_subsets(f, {n0, w, xs}, 3, "counter carry");
}

TEST_CASE("vmap of fori_loop: the i64 counter stays unbatched, batched consts and carries") {
  const Fn f = [](const std::vector<Tensor>& a) {
    return fori_loop(
        2, 7,
        [&](const Tensor& i, const Tensor& x) { return x * 0.9 + sin(cast(i, DType::f64) * a[1]) + gather(a[2], i); },
        a[0]);
  };
  check_all_subsets(f, {randn({3}, 12), randn({3}, 13), randn({7, 3}, 14)}, 4, "fori_loop");
}

TEST_CASE("vmap of while_loop: per-element trip counts, each element frozen after its own") {
  // Doubling until past a limit: the trip count depends on x0 and on the limit.
  const Fn f = [](const std::vector<Tensor>& a) {
    auto [x, n] = while_loop([&](const std::pair<Tensor, Tensor>& c) { return lt(sum(c.first), a[1]); },
                             [](const std::pair<Tensor, Tensor>& c) {
                               return std::pair{c.first * 2.0 + 0.25, c.second + 1.0};
                             },
                             std::pair{a[0], tensor({0.0}, {})});
    return concat({x, reshape(n, {1})});
  };
  const Tensor x0 = tensor({0.5, 0.25, 1.0, 3.0, 40.0, 0.125}, {6, 1});
  const Tensor limit = tensor({10.0}, {});
  const Tape v = check_vmap(f, {x0, limit}, {true, false}, "doubling, x0 batched");
  CHECK(top_calls(v, "while_loop") == 1);
  CHECK(!has_fallback(v, "while_loop"));
  // Trip counts 4, 5, 4, 2, 0, 5 (the last column).
  const Tensor out = run_checked(v, {x0, limit})[0];
  CHECK(index(out, 1, 1).values() == std::vector<double>{4, 5, 4, 2, 0, 5});
  // The limit batched (x0 shared), and both.
  (void)check_vmap(f, {tensor({0.5}, {1}), tensor({1.0, 100.0, 0.0, 7.0}, {4})}, {false, true}, "limit batched");
  (void)check_vmap(f, {x0, tensor({1.0, 100.0, 0.0, 7.0, 1e6, 3.0}, {6})}, {true, true}, "both batched");
}

TEST_CASE("vmap of while_loop: i64 carries are frozen too; a cond no batched value reaches keeps one trip count") {
  // An i64 counter carry (cast there and back) next to a batched float carry.
  const Fn f = [](const std::vector<Tensor>& a) {
    auto [x, k] = while_loop([&](const std::pair<Tensor, Tensor>& c) { return gt(c.first, a[1]); },
                             [](const std::pair<Tensor, Tensor>& c) {
                               return std::pair{sqrt(c.first) * 0.9,
                                                cast(cast(c.second, DType::f64) + 3.0, DType::i64)};
                             },
                             std::pair{a[0], cast(tensor({1.0}, {}), DType::i64)});
    return x + cast(k, DType::f64);
  };
  const Tape v = check_vmap(f, {tensor({0.5, 4.0, 100.0, 1e4}, {4}), tensor({1.0}, {})}, {true, false}, "i64 carry");
  CHECK(test::count_calls(v, "gather", true) >= 1);
  // cond reads only the counter: one trip count for all; the body's batched carry
  // batched, the counter not.
  const Fn g = [](const std::vector<Tensor>& a) {
    auto [x, i] = while_loop([](const std::pair<Tensor, Tensor>& c) { return lt(c.second, tensor({4.0}, {})); },
                             [&](const std::pair<Tensor, Tensor>& c) {
                               return std::pair{tanh(c.first * a[1]) + c.second, c.second + 1.0};
                             },
                             std::pair{a[0], tensor({0.0}, {})});
    return x * i;
  };
  const Tape w = check_vmap(g, {randn({3, 2}, 20), randn({2}, 21)}, {true, false}, "unbatched cond");
  for (const Op& op : w.ops)
    if (op.kind == OpKind::call && op.prim->name == "while_loop") {
      const Tape& body = op.attrs.tape("body");
      CHECK(body.type(body.inputs().back()).shape.empty());  // (the carry i)
      CHECK(op.attrs.has("trips"));
    }
  check_all_subsets(g, {randn({2}, 22), randn({2}, 23)}, 3, "unbatched cond");
}

TEST_CASE("vmap of checkpoint and call: the body batched once") {
  const Fn f = [](const std::vector<Tensor>& a) {
    auto block = checkpoint([](const Tensor& x, const Tensor& w) { return tanh(x * w) + sin(x); });
    return block(block(a[0], a[1]), a[1]) * 2.0;
  };
  check_all_subsets(f, {randn({4}, 30), randn({4}, 31)}, 3, "checkpoint");
  const Tape v = check_vmap(f, {randn({3, 4}, 32), randn({4}, 33)}, {true, false}, "checkpoint");
  CHECK(top_calls(v, "checkpoint") == 2);
  CHECK(!has_fallback(v, "checkpoint"));
  // The gradient of a checkpointed function has a `call`: vmap of grad batches it.
  const Fn g = [&](const std::vector<Tensor>& a) {
    return reel::grad([&](const Tensor& x) { return sum(f({x, a[1]})); }, a[0]).grads[0];
  };
  const Tape w = check_vmap(g, {randn({3, 4}, 34), randn({4}, 35)}, {true, false}, "grad of checkpoint");
  CHECK(test::count_calls(w, "call", true) >= 1);
  CHECK(!has_fallback(w, "call"));
}

TEST_CASE("vmap of conv2d, its gradients and the pools: one call where one argument is batched, vs a loop") {
  const Attrs conv{{"stride", Shape{2, 1}}, {"padding", Shape{1, 1}}, {"dilation", Shape{1, 2}}};
  Attrs data = conv, filter = conv;
  data.set("input_hw", Shape{6, 5});
  filter.set("kernel_hw", Shape{3, 2});
  const Tensor x = randn({2, 3, 6, 5}, 40), w = randn({4, 3, 3, 2}, 41), dy = randn({2, 4, 3, 5}, 42);
  struct Case {
    const char* prim;
    std::vector<Tensor> args;
    Attrs attrs;
  };
  const Attrs pool{{"kernel", Shape{2, 2}}, {"padding", Shape{1, 1}}};
  Attrs pool_grad = pool;
  pool_grad.set("input_hw", Shape{6, 5});
  const Tensor pooled = randn({2, 3, 4, 3}, 43);
  const std::vector<Case> cases = {
      {"conv2d", {x, w}, conv},
      {"conv2d_data_grad", {dy, w}, data},
      {"conv2d_filter_grad", {x, dy}, filter},
      {"max_pool2d", {x}, pool},
      {"max_pool2d_grad", {x, pooled}, pool},
      {"max_pool2d_gather", {x, randn({2, 3, 6, 5}, 44)}, pool},
      {"avg_pool2d", {x}, pool},
      {"avg_pool2d_grad", {pooled}, pool_grad},
  };
  for (const Case& c : cases) {
    const Fn f = [&](const std::vector<Tensor>& a) { return apply(c.prim, a, c.attrs); };
    const bool conv_like = std::string_view(c.prim).starts_with("conv2d");
    check_all_subsets(f, c.args, 3, c.prim, [&](unsigned mask, const Tape& v) {
      // Only a convolution with both arguments batched runs one call per element.
      CHECK_MESSAGE(has_fallback(v, c.prim) == (conv_like && mask == 3u), c.prim, " mask ", mask, ": ", to_string(v));
    });
  }
}

TEST_CASE("per-example gradients of a small CNN: vmap of grad vs a loop of grad, and grad of vmap") {
  const Tensor w1 = randn({4, 1, 3, 3}, 50) * 0.4, w2 = randn({3, 16}, 51) * 0.3;
  // One image [1, 1, 6, 6] -> conv, relu-free smooth nonlinearity, avg pool, linear.
  auto loss = [](const Tensor& img, const Tensor& c, const Tensor& l) {
    const Tensor h = tanh(conv2d(img, c, {.padding = {1, 1}}));           // [1,4,6,6]
    const Tensor p = avg_pool2d(h, {3, 3});                               // [1,4,2,2]
    const Tensor m = max_pool2d(h, {3, 3});
    return sum(square(matmul(l, reshape(p + m, {16}))));
  };
  const Tensor images = randn({5, 1, 1, 6, 6}, 52);
  // vmap of grad with respect to both weights: per-example gradients.
  const Fn per_example = [&](const std::vector<Tensor>& a) {
    const auto g = reel::grad([&](const Tensor& c, const Tensor& l) { return loss(a[0], c, l); }, a[1], a[2]);
    return concat({reshape(g.grads[0], {g.grads[0].numel()}), reshape(g.grads[1], {g.grads[1].numel()})});
  };
  const Tape v = check_vmap(per_example, {images, w1, w2}, {true, false, false}, "per-example gradients", 1e-10, 1e-12);
  CHECK(!has_fallback(v, "conv2d"));
  CHECK(!has_fallback(v, "avg_pool2d"));
  CHECK(!has_fallback(v, "max_pool2d"));
  // grad of vmap: the gradient of the batch's summed losses is the sum of the per-example ones.
  const Tensor summed = reel::grad(
      [&](const Tensor& c, const Tensor& l) {
        return sum(reel::vmap([&](const Tensor& img) { return loss(img, c, l); })(images));
      },
      w1, w2).grads[0];
  Tensor expected = zeros({4, 1, 3, 3});
  for (int64_t j = 0; j < 5; ++j)
    expected = expected + reel::grad([&](const Tensor& c) { return loss(index(images, j), c, w2); }, w1).grads[0];
  check_close(summed, expected, 1e-10, 1e-12, "grad of vmap of a CNN");
}

TEST_CASE("vmap of grad and grad of vmap through a scan, with every checkpoint policy") {
  const Tensor h0 = randn({3}, 60), W = randn({3, 3}, 61) * 0.5;
  const Tensor xs = randn({4, 5, 3}, 62);  // a batch of 4 sequences of 5 steps
  for (const Checkpoint cp : {Checkpoint{}, Checkpoint::every(2), Checkpoint::sqrt(), Checkpoint::binomial(2)}) {
    auto loss = [cp](const Tensor& h, const Tensor& x, const Tensor& w) {
      auto [last, ys] = reel::scan(
          [&](const Tensor& c, const Tensor& xt) {
            const Tensor next = tanh(matmul(w, c) + xt);
            return std::pair{next, sum(next * next)};
          },
          h, x, ScanOptions{.checkpoint = cp});
      return sum(ys) + sum(last);
    };
    const std::string what = fmt::format("checkpoint kind {}", static_cast<int>(cp.kind));
    // vmap of grad: each sequence's gradient with respect to W and h0.
    const Fn per_example = [&](const std::vector<Tensor>& a) {
      const auto g = reel::grad(loss, a[0], a[1], a[2]);
      return concat({g.grads[0], reshape(g.grads[2], {9})});
    };
    check_all_subsets(per_example, {h0, index(xs, 0), W}, 3, "vmap of grad, " + what, [&](unsigned, const Tape& v) {
      CHECK(!has_fallback(v, "scan"));
      CHECK(!has_fallback(v, "revolve"));
      CHECK((test::count_calls(v, "revolve", true) > 0) == (cp.kind == Checkpoint::Kind::binomial));
    });
    // grad of vmap: the summed losses' gradient is the per-example gradients' sum.
    const auto g = reel::grad(
        [&](const Tensor& h, const Tensor& w) {
          return sum(reel::vmap([&](const Tensor& x) { return loss(h, x, w); })(xs));
        },
        h0, W);
    Tensor dh = zeros({3}), dw = zeros({3, 3});
    for (int64_t j = 0; j < 4; ++j) {
      const auto gj = reel::grad(loss, h0, index(xs, j), W);
      dh = dh + gj.grads[0], dw = dw + gj.grads[2];
    }
    check_close(g.grads[0], dh, 1e-10, 1e-12, "grad of vmap, dh0, " + what);
    check_close(g.grads[1], dw, 1e-10, 1e-12, "grad of vmap, dW, " + what);
  }
}

TEST_CASE("vector-mode forward (jvp_tape with k tangents) through a scan and a while_loop") {
  const Fn f = [](const std::vector<Tensor>& a) {
    auto [h, ys] = reel::scan([&](const Tensor& c, const Tensor& x) { return std::pair{sin(c * a[1]) + x, c}; },
                              a[0], a[2]);
    const Tensor z = while_loop([](const Tensor& c) { return lt(sum(c), tensor({6.0}, {})); },
                                [](const Tensor& c) { return c * 1.5 + 0.5; }, square(h));
    return sum(z) + sum(ys);
  };
  const std::vector<Tensor> args{randn({2}, 70), randn({2}, 71), randn({3, 2}, 72)};
  const Tape t = reel::test::trace_list(f, args);
  const int64_t k = 3;
  const Tape J = jvp_tape(t, k), J1 = jvp_tape(t);
  std::vector<Tensor> in = args, tangents;
  for (std::size_t i = 0; i < args.size(); ++i) {
    Shape s{k};
    s.insert(s.end(), args[i].shape().begin(), args[i].shape().end());
    tangents.push_back(randn(s, 80 + i));
  }
  in.insert(in.end(), tangents.begin(), tangents.end());
  const std::vector<Tensor> out = run_checked(J, in);
  REQUIRE(out.size() == 2);
  for (int64_t j = 0; j < k; ++j) {
    std::vector<Tensor> one = args;
    for (const Tensor& tg : tangents) one.push_back(index(tg, j));
    const std::vector<Tensor> ref = play(J1, one);
    check_close(out[0], ref[0], 1e-12, 1e-12, "jvp value");
    check_close(index(out[1], j), ref[1], 1e-10, 1e-12, fmt::format("tangent {}", j));
  }
}

TEST_CASE("vmap of while_loop: reel::vmap and jit, and grad of a per-element trip count masks each element") {
  auto collatz_like = [](const Tensor& x0) {
    return while_loop([](const Tensor& x) { return gt(x, tensor({1.0}, {})); },
                      [](const Tensor& x) { return x * 0.5 + 0.1; }, x0);
  };
  const Tensor xs = tensor({0.5, 3.0, 17.0, 2.0});
  const Tensor got = reel::vmap(collatz_like)(xs);
  for (int64_t j = 0; j < 4; ++j) check_close(index(got, j), collatz_like(index(xs, j)), 0, 0, "reel::vmap");
  auto jitted = reel::jit([&](const Tensor& x) { return reel::vmap(collatz_like)(x); });
  check_close(jitted(xs), got, 1e-12, 1e-12, "jit of vmap");
  // Its trip count is recorded where it runs under grad (the largest of the batch), each
  // element frozen after its own: the gradient is each element's.
  const Tensor dc = reel::grad([&](const Tensor& x) { return sum(reel::vmap(collatz_like)(x)); }, xs).grads[0];
  for (int64_t j = 0; j < 4; ++j)
    check_close(index(dc, j), reel::grad(collatz_like, index(xs, j)).grads[0], 1e-12, 1e-12, "grad of vmap, per element");
  // With one trip count for the whole batch (cond reads no batched value) the loop keeps
  // its trips, and grad of vmap works.
  auto scaled = [](const Tensor& x0) {
    auto [x, i] = while_loop([](const std::pair<Tensor, Tensor>& c) { return lt(c.second, tensor({3.0}, {})); },
                             [](const std::pair<Tensor, Tensor>& c) {
                               return std::pair{sin(c.first) * 1.5, c.second + 1.0};
                             },
                             std::pair{x0, tensor({0.0}, {})});
    return x;
  };
  const Tensor dx = reel::grad([&](const Tensor& x) { return sum(reel::vmap(scaled)(x)); }, xs).grads[0];
  for (int64_t j = 0; j < 4; ++j)
    check_close(index(dx, j), reel::grad(scaled, index(xs, j)).grads[0], 1e-12, 1e-12, "grad of vmap of while_loop");
}

TEST_CASE("vmap of a user's primitive: its batch rule, the fallback without one, define_function_primitive") {
  // weighted_norm(x [n], w [n]) = sum(w * x * x), with a batch rule that reduces the last axis.
  auto eager = [](std::span<const Tensor> x, const Attrs&) { return sum(x[1] * x[0] * x[0]); };
  auto type = [](std::span<const VarType> in, const Attrs&) { return VarType{in[0].dtype, {}}; };
  define_primitive({.name = "test_batch_wnorm",
                    .arity = 2,
                    .type = type,
                    .eager = eager,
                    .batch = [](const std::vector<Tensor>& a, const std::vector<bool>&, int64_t, const Attrs&) {
                      return sum(a[1] * a[0] * a[0], -1);  // a batched [B, n] broadcasts with an unbatched [n]
                    }});
  define_primitive({.name = "test_batch_wnorm_plain", .arity = 2, .type = type, .eager = eager});
  define_primitive({.name = "test_batch_wnorm_bad",
                    .arity = 2,
                    .type = type,
                    .eager = eager,
                    .batch = [](const std::vector<Tensor>& a, const std::vector<bool>&, int64_t, const Attrs&) {
                      return sum(a[1] * a[0] * a[0]);  // forgets the batch
                    }});
  define_function_primitive("test_batch_fn", 2, [](const std::vector<Tensor>& a) {
    return reel::scan([&](const Tensor& c, const Tensor& x) { return std::pair{c * a[1] + x, none}; }, a[0] * 0.0,
                      a[0]).first;
  });
  const Tensor x = randn({4}, 90), w = randn({4}, 91);
  for (const char* name : {"test_batch_wnorm", "test_batch_wnorm_plain"}) {
    const Fn f = [&](const std::vector<Tensor>& a) { return reel::apply(name, std::span<const Tensor>(a)) * 2.0; };
    check_all_subsets(f, {x, w}, 3, name, [&](unsigned, const Tape& v) {
      CHECK(has_fallback(v, name) == (std::string_view(name) == "test_batch_wnorm_plain"));
    });
  }
  const Fn bad = [](const std::vector<Tensor>& a) { return reel::apply("test_batch_wnorm_bad", std::span<const Tensor>(a)); };
  const Tape t = reel::test::trace_list(bad, {x, w});
  const bool flags[] = {true, false};
  CHECK_ERROR(vmap_tape(t, flags, 3), "test_batch_wnorm_bad", "the batch rule returned f64[]", "expected f64[3]");
  // A function primitive batches f's tape: its scan by the scan rule.
  const Fn g = [](const std::vector<Tensor>& a) { return reel::apply("test_batch_fn", std::span<const Tensor>(a)); };
  check_all_subsets(g, {randn({3, 2}, 92), randn({2}, 93)}, 4, "function primitive", [](unsigned, const Tape& v) {
    CHECK(!has_fallback(v, "test_batch_fn"));
  });
}

TEST_CASE("vmap of nested loops: a while_loop with per-element trip counts and a checkpoint inside a scan") {
  const Fn f = [](const std::vector<Tensor>& a) {
    auto [h, ys] = reel::scan(
        [&](const Tensor& c, const Tensor& x) {
          // Inside each step: halve until below the step's own bound (trips vary by element and step).
          const Tensor d = while_loop([&](const Tensor& v) { return gt(sum(abs(v)), abs(x) + 0.1); },
                                      [](const Tensor& v) { return v * 0.5; }, c * 3.0 + 1.0);
          const Tensor e = checkpoint([](const Tensor& v, const Tensor& w) { return tanh(v * w); })(d, a[1]);
          return std::pair{e, sum(d)};
        },
        a[0], a[2]);
    return concat({h, ys});
  };
  const std::vector<Tensor> args{randn({2}, 100), randn({2}, 101), randn({4}, 102)};
  check_all_subsets(f, args, 3, "nested loops", [](unsigned, const Tape& v) {
    CHECK(!has_fallback(v, "scan"));
    CHECK(!has_fallback(v, "while_loop"));
    CHECK(!has_fallback(v, "checkpoint"));
  });
}

TEST_CASE("vmap of loops and convolutions over an empty batch") {
  const Fn f = [](const std::vector<Tensor>& a) {
    const Tensor r = rnn(a[0], a[1], a[2]);
    const Tensor w = while_loop([](const Tensor& v) { return gt(sum(v), tensor({1.0}, {})); },
                                [](const Tensor& v) { return v * 0.5; }, square(a[0]) + 1.0);
    return concat({r, w});
  };
  const Tape t = reel::test::trace_list(f, {randn({3}, 110), randn({4, 3}, 111), randn({3, 3}, 112)});
  const bool flags[] = {true, true, false};
  const Tape v = vmap_tape(t, flags, 0);
  const std::vector<Tensor> out = run_checked(v, {zeros({0, 3}), zeros({0, 4, 3}), randn({3, 3}, 113)});
  CHECK(out[0].shape() == Shape{0, 18});
  const Fn c = [](const std::vector<Tensor>& a) { return conv2d(a[0], a[1]); };
  const Tape ct = reel::test::trace_list(c, {randn({1, 2, 4, 4}, 114), randn({3, 2, 2, 2}, 115)});
  for (const auto& fl : {std::array<bool, 2>{true, false}, std::array<bool, 2>{false, true}}) {
    const Tape cv = vmap_tape(ct, fl, 0);
    const Tensor x = fl[0] ? zeros({0, 1, 2, 4, 4}) : randn({1, 2, 4, 4}, 116);
    const Tensor w = fl[1] ? zeros({0, 3, 2, 2, 2}) : randn({3, 2, 2, 2}, 117);
    CHECK(run_checked(cv, {x, w})[0].shape() == Shape{0, 1, 3, 3, 3});
  }
}
