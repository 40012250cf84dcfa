#include "test_util.hpp"

namespace reel::test {

std::vector<Tensor> run_checked(const Tape& tape, const std::vector<Tensor>& args) {
  check_round_trip(tape);
  std::vector<Tensor> interpreted = play(tape, args);
  const std::vector<Tensor> compiled = compile(tape)(args);
  REQUIRE(compiled.size() == interpreted.size());
  // Threads: the same tape with its kernels cut into chunks of a few elements (as large
  // kernels are) on two threads, then on one: the same bits both times, and again on
  // two.
  const CompiledFunction chunked = compile(tape, {.chunk_elements = 4});
  const int before = num_threads();
  set_num_threads(2);
  const std::vector<Tensor> two = chunked(args);
  const std::vector<Tensor> again = chunked(args);
  set_num_threads(1);
  const std::vector<Tensor> one = chunked(args);
  set_num_threads(before);
  for (std::size_t k = 0; k < compiled.size(); ++k) {
    CHECK(compiled[k].dtype() == interpreted[k].dtype());
    const Tolerance tol = compiled_tolerance(interpreted[k].dtype());
    check_close(compiled[k], interpreted[k], tol.rtol, tol.atol,
                fmt::format("output {} compiled vs interpreted", k));
    check_close(two[k], interpreted[k], tol.rtol, tol.atol,
                fmt::format("output {} compiled in chunks on 2 threads vs interpreted", k));
    check_same_bits(again[k], two[k], fmt::format("output {} compiled in chunks, on 2 threads, called twice", k));
    check_same_bits(two[k], one[k], fmt::format("output {} compiled in chunks, on 2 threads vs 1", k));
  }
  return interpreted;
}

std::vector<Tensor> finite_diff(const Fn& f, const std::vector<Tensor>& args, double h) {
  std::vector<Tensor> grads;
  for (std::size_t k = 0; k < args.size(); ++k) {
    const std::vector<double> base = args[k].values();
    std::vector<double> g(base.size());
    for (std::size_t i = 0; i < base.size(); ++i) {
      auto shifted = [&](double delta) {
        std::vector<double> v = base;
        v[i] += delta;
        std::vector<Tensor> a = args;
        a[k] = tensor(v, args[k].shape(), args[k].dtype());
        return f(a).item();
      };
      g[i] = (shifted(h) - shifted(-h)) / (2 * h);
    }
    grads.push_back(tensor(g, args[k].shape()));
  }
  return grads;
}

Tape trace_list(const Fn& fn, const std::vector<Tensor>& args) {
  switch (args.size()) {
    case 1: return trace([&](const Tensor& a) { return fn({a}); }, args[0]);
    case 2: return trace([&](const Tensor& a, const Tensor& b) { return fn({a, b}); }, args[0], args[1]);
    case 3:
      return trace([&](const Tensor& a, const Tensor& b, const Tensor& c) { return fn({a, b, c}); },
                   args[0], args[1], args[2]);
  }
  throw Error("trace_list: 1 to 3 arguments");
}

std::vector<Tensor> check_gradient(const Fn& fn, const std::vector<Tensor>& args,
                                   const std::string& what, double rtol, double atol) {
  const Tape forward = trace_list(fn, args);
  const Tape gt = grad_tape(forward);
  run_checked(forward, args);
  const std::vector<Tensor> out = run_checked(gt, args);
  REQUIRE(out.size() == args.size() + 1);
  check_close(out[0], fn(args), 1e-12, 1e-12, what + " value");
  const std::vector<Tensor> fd = finite_diff(fn, args);
  std::vector<Tensor> grads(out.begin() + 1, out.end());
  for (std::size_t k = 0; k < args.size(); ++k) {
    CHECK_MESSAGE(grads[k].shape() == args[k].shape(), what, ": gradient ", k, " has shape ",
                  shape_str(grads[k].shape()), ", argument has ", shape_str(args[k].shape()));
    check_close(grads[k], fd[k], rtol, atol, fmt::format("{}: d/darg{}", what, k));
  }
  return grads;
}

}  // namespace reel::test
