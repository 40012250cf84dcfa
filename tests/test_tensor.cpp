// Tensors and eager kernels, with hand-computed values.
#include <thread>

#include "test_util.hpp"

using namespace reel;

TEST_CASE("tensor creation and accessors") {
  const Tensor v = tensor({1.0, 2.0, 3.0});
  CHECK(v.shape() == Shape{3});
  CHECK(v.dtype() == DType::f64);
  CHECK(v.numel() == 3);
  CHECK(v.values() == std::vector<double>{1, 2, 3});
  const Tensor m = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f32);
  CHECK(m.dtype() == DType::f32);
  CHECK(m.rank() == 2);
  CHECK(m.values() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(scalar(2.5).item() == 2.5);
  CHECK(scalar(2.5).shape().empty());
  CHECK(zeros({2, 2}).values() == std::vector<double>(4, 0.0));
  CHECK(ones({3}, DType::f32).values() == std::vector<double>(3, 1.0));
  CHECK(full({2}, 7.0).values() == std::vector<double>{7, 7});
  CHECK(zeros({0, 3}).numel() == 0);
}

TEST_CASE("random tensors are reproducible and roughly distributed") {
  const Tensor a = randn({1000}, 42), b = randn({1000}, 42), c = randn({1000}, 43);
  CHECK(a.values() == b.values());
  CHECK(a.values() != c.values());
  double mean = 0, var = 0;
  for (double v : a.values()) mean += v / 1000;
  for (double v : a.values()) var += (v - mean) * (v - mean) / 1000;
  CHECK(std::abs(mean) < 0.15);
  CHECK(std::abs(var - 1) < 0.15);
  for (double v : rand({1000}, 1).values()) CHECK((v >= 0 && v < 1));
  CHECK(randn({4}, 1, DType::f32).dtype() == DType::f32);
}

TEST_CASE("elementwise kernels with broadcasting") {
  const Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK((a + tensor({10, 20, 30})).values() == std::vector<double>{11, 22, 33, 14, 25, 36});
  CHECK((a * tensor({2, 3}, {2, 1})).values() == std::vector<double>{2, 4, 6, 12, 15, 18});
  CHECK((tensor({1, 2}, {2, 1}) - tensor({1, 2, 3}, {1, 3})).values() ==
        std::vector<double>{0, -1, -2, 1, 0, -1});
  CHECK((a / 2.0).values() == std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3});
  CHECK((12.0 / a).values() == std::vector<double>{12, 6, 4, 3, 2.4, 2});
  CHECK((-a).values() == std::vector<double>{-1, -2, -3, -4, -5, -6});
  CHECK(square(a).values() == std::vector<double>{1, 4, 9, 16, 25, 36});
  CHECK(pow(tensor({4, 9}), 0.5).values() == std::vector<double>{2, 3});
  CHECK(sigmoid(scalar(0.0)).item() == 0.5);
  CHECK(exp(scalar(0.0)).item() == 1.0);
  CHECK(log(scalar(1.0)).item() == 0.0);
  CHECK(sqrt(scalar(16.0)).item() == 4.0);
  CHECK(tanh(scalar(0.0)).item() == 0.0);
  CHECK(cos(scalar(0.0)).item() == 1.0);
  CHECK(sin(scalar(0.0)).item() == 0.0);
}

TEST_CASE("reductions, shape ops and matmul") {
  const Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(sum(a).item() == 21);
  CHECK(mean(a).item() == 3.5);
  CHECK(sum(a, 0).values() == std::vector<double>{5, 7, 9});
  CHECK(sum(a, 1).values() == std::vector<double>{6, 15});
  CHECK(sum(a, 1).shape() == Shape{2});
  CHECK(sum_to(a, {1, 3}).values() == std::vector<double>{5, 7, 9});
  CHECK(sum_to(a, {2, 1}).values() == std::vector<double>{6, 15});
  CHECK(transpose(a).shape() == Shape{3, 2});
  CHECK(transpose(a).values() == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(reshape(a, {3, 2}).values() == a.values());
  CHECK(broadcast_to(tensor({1, 2}, {2, 1}), {2, 2}).values() == std::vector<double>{1, 1, 2, 2});
  const Tensor b = tensor({1, 0, 0, 1, 1, 1}, {3, 2});
  CHECK(matmul(a, b).values() == std::vector<double>{4, 5, 10, 11});
  CHECK(matmul(a, tensor({1, 1, 1})).values() == std::vector<double>{6, 15});
  const Tensor a32 = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f32);
  CHECK(matmul(a32, tensor({1, 0, 0, 1, 1, 1}, {3, 2}, DType::f32)).values() ==
        std::vector<double>{4, 5, 10, 11});
}

TEST_CASE("formatting a tensor") {
  CHECK(fmt::format("{}", tensor({1, 2})) == "f64[2] [1, 2]");
  CHECK(fmt::format("{}", scalar(3, DType::f32)) == "f32[] 3");
}

TEST_CASE("i64: arange, cast, text, errors, no gradient, compiled") {
  const Tensor r = arange(5);
  CHECK(r.dtype() == DType::i64);
  CHECK(r.values() == std::vector<double>{0, 1, 2, 3, 4});
  CHECK(fmt::format("{}", r) == "i64[5] [0, 1, 2, 3, 4]");
  CHECK_THROWS_WITH_AS(tensor({1.5}, {1}, DType::i64), doctest::Contains("i64 tensor holds integers, got 1.5"), Error);
  CHECK_THROWS_WITH_AS(randn({2}, 1, DType::i64), doctest::Contains("randn: expected dtype f32 or f64, got i64"), Error);
  CHECK_THROWS_WITH_AS(exp(r), doctest::Contains("exp: expected an f32 or f64 argument 1, got i64[5]"), Error);
  CHECK_THROWS_WITH_AS(r + r, doctest::Contains("add: expected an f32 or f64 argument 1"), Error);
  // cast: truncation toward zero; gradients between float dtypes only.
  CHECK(cast(tensor({-1.7, 2.9, 0.0}), DType::i64).values() == std::vector<double>{-1, 2, 0});
  CHECK(cast(r, DType::f32).dtype() == DType::f32);
  CHECK_THROWS_WITH_AS(cast(tensor({std::nan("")}), DType::i64), doctest::Contains("has no i64 value"), Error);
  const auto g = grad([](const Tensor& x) { return sum(cast(cast(x, DType::f32), DType::f64) * x); }, tensor({1.5, 2.0}));
  CHECK(g.grads[0].values() == std::vector<double>{3.0, 4.0});
  // An i64 argument: an input of the tape, with a zero i64 "gradient".
  auto f = [](const Tensor& x, const Tensor& idx) { return sum(x * cast(idx, DType::f64)); };
  const auto gi = grad(f, tensor({1.0, 2.0, 3.0}), arange(3));
  CHECK(gi.value.item() == 8);
  CHECK(gi.grads[0].values() == std::vector<double>{0, 1, 2});
  CHECK(gi.grads[1].dtype() == DType::i64);
  CHECK(gi.grads[1].values() == std::vector<double>{0, 0, 0});
  const Tape t = trace(f, tensor({1.0, 2.0, 3.0}), arange(3));
  const Tape gt = grad_tape(t);
  test::check_round_trip(gt);
  const auto out = compile(gt)({tensor({4.0, 5.0, 6.0}), arange(3)});
  CHECK(out[0].item() == 17);
  CHECK(out[1].values() == std::vector<double>{0, 1, 2});
  CHECK(out[2].dtype() == DType::i64);
  // jvp: an i64 input has no tangent.
  const auto j = jvp(f, {tensor({1.0, 2.0, 3.0}), arange(3)}, {ones({3}), zeros({3}, DType::i64)});
  CHECK(j.tangent.item() == 3);
  // Exact i64 constants in text, beyond 2^53.
  const Tape c = parse_tape("%1 = const [9007199254740993, -3]::i64[2]\nout %1");
  CHECK(to_string(c) == "%1 = const [9007199254740993, -3]::i64[2]\nout %1");
  CHECK(play(c, {})[0].data<int64_t>()[0] == 9007199254740993LL);
  CHECK_THROWS_WITH_AS(parse_tape("%1 = const [1.5]::i64[1]\nout %1"), doctest::Contains("expected an integer"), Error);
}

// Small tensors' memory comes from a per-thread pool (runtime/src/storage.hpp): blocks
// made on one thread and freed on another, reused there, stay 64-byte aligned and hold
// what was written, at every size up to past the pool's largest.
TEST_CASE("small tensor blocks move between threads' pools intact and aligned") {
  std::vector<Tensor> made(130);
  std::thread maker([&] {
    for (std::size_t i = 0; i < made.size(); ++i)
      made[i] = full({static_cast<int64_t>(i)}, static_cast<double>(i));
  });
  maker.join();
  for (int round = 0; round < 3; ++round) {
    std::vector<Tensor> again;
    std::thread user([&] {
      for (std::size_t i = 0; i < made.size(); ++i) {
        again.push_back(made[i] * 2.0);
        made[i] = Tensor();  // freed on this thread: kept by its pool, reused below
      }
      for (std::size_t i = 0; i < again.size(); ++i) made[i] = again[i] + 1.0;
    });
    user.join();
    for (std::size_t i = 0; i < made.size(); ++i) {
      REQUIRE(made[i].numel() == static_cast<int64_t>(i));
      CHECK(reinterpret_cast<std::uintptr_t>(made[i].raw()) % 64 == 0);
      const double want = static_cast<double>(i) * 2 + 1;
      for (double v : made[i].values()) CHECK(v == want);
      made[i] = full({static_cast<int64_t>(i)}, static_cast<double>(i));
    }
  }
}
