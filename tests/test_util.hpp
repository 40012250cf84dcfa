#pragma once
// Helpers shared by the tests. Every tape a test runs goes through run_checked, which
// also checks that the tape's text form parses back to the same text.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <reel/reel.hpp>

#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <variant>

// Checks that `expr` throws a reel::Error whose message holds every one of the given parts.
#define CHECK_ERROR(expr, ...)                                                   \
  do {                                                                           \
    std::string message;                                                         \
    try {                                                                        \
      (void)(expr);                                                              \
    } catch (const reel::Error& e) {                                             \
      message = e.what();                                                        \
    }                                                                            \
    CHECK_MESSAGE(!message.empty(), "no reel::Error from " #expr);               \
    for (const std::string& part : std::initializer_list<std::string>{__VA_ARGS__}) \
      CHECK_MESSAGE(message.find(part) != std::string::npos, "message '", message, \
                    "' lacks '", part, "'");                                     \
  } while (0)

namespace reel::test {

// print -> parse -> print gives the same text.
inline void check_round_trip(const Tape& tape) {
  const std::string text = to_string(tape);
  const std::string again = to_string(parse_tape(text));
  CHECK_MESSAGE(text == again, "round trip changed the tape:\n", text, "\n---\n", again);
}

// How closely compiled results must match the interpreter's (README documents these):
// vector math (libmvec), FMA contraction and reassociated sums change the last bits.
struct Tolerance {
  double rtol, atol;
};
inline Tolerance compiled_tolerance(DType dtype) {
  return dtype == DType::f64 ? Tolerance{1e-12, 1e-13} : Tolerance{1e-5, 1e-6};
}

// The benchmark's recurrences (bench/scaling.cpp) as plain loops, each the sum of its
// last value: x <- sin(x) * 1.01 + square(x) * 0.001 and x <- tanh(W x + b) * 0.5 + x * 0.5.
inline Tensor sin_recurrence(const Tensor& x0, int steps) {
  Tensor x = x0;
  for (int i = 0; i < steps; ++i) x = sin(x) * 1.01 + square(x) * 0.001;
  return sum(x);
}
inline Tensor tanh_recurrence(const Tensor& W, const Tensor& b, const Tensor& x0, int steps) {
  Tensor x = x0;
  for (int i = 0; i < steps; ++i) x = tanh(matmul(W, x) + b) * 0.5 + x * 0.5;
  return sum(x);
}

// Turns off re-rolling in grad_tape, jvp_tape and compile while it lives: for tests of
// what unrolled traced loops compile to.
struct NoReroll {
  bool before = set_auto_reroll(false);
  NoReroll() = default;
  NoReroll(const NoReroll&) = delete;
  NoReroll& operator=(const NoReroll&) = delete;
  ~NoReroll() { set_auto_reroll(before); }
};

// How many calls of the primitive `name` the tape has: on the tape itself, or with
// into_bodies also inside the tape attributes (loop bodies), recursively.
inline int count_calls(const Tape& t, std::string_view name, bool into_bodies = false) {
  int n = 0;
  for (const Op& op : t.ops) {
    if (op.kind != OpKind::call) continue;
    n += op.prim->name == name;
    if (into_bodies)
      for (const auto& [attr, value] : op.attrs.items())
        if (const auto* ref = std::get_if<TapeRef>(&value)) n += count_calls(*ref->tape, name, true);
  }
  return n;
}

// Runs `tape` through the interpreter after checking its text round trip, and checks
// that the compiled tape gives the same outputs.
std::vector<Tensor> run_checked(const Tape& tape, const std::vector<Tensor>& args);

// Central finite differences of a scalar function of several tensors: one gradient
// tensor per argument (f64).
std::vector<Tensor> finite_diff(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                const std::vector<Tensor>& args, double h = 1e-6);

// |a - b| <= atol + rtol * |b| elementwise, with a message naming the first failure.
inline void check_close(const Tensor& a, const Tensor& b, double rtol, double atol,
                        const std::string& what) {
  REQUIRE_MESSAGE(a.shape() == b.shape(), what, ": shapes ", shape_str(a.shape()), " vs ",
                  shape_str(b.shape()));
  const auto va = a.values(), vb = b.values();
  for (std::size_t i = 0; i < va.size(); ++i) {
    const bool ok = std::abs(va[i] - vb[i]) <= atol + rtol * std::abs(vb[i]);
    if (!ok) {
      FAIL_CHECK(what, ": element ", i, ": ", va[i], " vs ", vb[i]);
      return;
    }
  }
}

// The same dtype, shape and bytes (NaNs of one kind equal).
inline void check_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  REQUIRE_MESSAGE((a.dtype() == b.dtype() && a.shape() == b.shape()), what, ": ", type_str(a.dtype(), a.shape()),
                  " vs ", type_str(b.dtype(), b.shape()));
  if (a.nbytes() > 0 && std::memcmp(a.raw(), b.raw(), a.nbytes()) != 0) {
    const auto va = a.values(), vb = b.values();
    for (std::size_t i = 0; i < va.size(); ++i)
      if (std::memcmp(&va[i], &vb[i], sizeof(double)) != 0) {
        FAIL_CHECK(what, ": element ", i, ": ", va[i], " vs ", vb[i], " (not the same bits)");
        return;
      }
    FAIL_CHECK(what, ": not the same bytes");
  }
}

// The registry walks sample an elementwise primitive's arguments in (0.5, 1.5), scaled by
// this: by 1/2 for those defined only on [-1, 1] (asin, acos), so they stay inside.
inline double sample_scale(const std::string& prim) { return prim == "asin" || prim == "acos" ? 0.5 : 1.0; }

// A function of its argument list, for tests that pass several tensors.
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Traces fn over `args` (as separate tape inputs; up to three).
Tape trace_list(const Fn& fn, const std::vector<Tensor>& args);

// Checks the gradient tape of fn against finite differences at `args`, through the
// interpreter (and whatever run_checked adds). Returns the gradients.
std::vector<Tensor> check_gradient(const Fn& fn, const std::vector<Tensor>& args,
                                   const std::string& what, double rtol = 1e-6,
                                   double atol = 1e-7);

// A hand-built tape `inp %1::f64[2]; %2 = prim(%1); out %2`, for primitives that are
// not registered (tests of what passes do with a primitive lacking a rule).
inline Tape tape_calling(const Primitive& prim) {
  Tape t;
  Op in;
  in.kind = OpKind::input;
  in.type = {DType::f64, {2}};
  Op call;
  call.kind = OpKind::call;
  call.prim = &prim;
  call.args = {1};
  call.type = in.type;
  t.ops = {in, call};
  t.outputs = {2};
  return t;
}

// A chain of `n` scalar operations on elements of x read in no order a loop could
// follow: every kernel of its gradient is straight-line code (fused 0-d loops), which
// the quick tier takes. `wave` (sin or cos) makes chains whose kernels differ.
template <class Wave>
inline Tape scalar_chain(int n, Wave wave) {
  std::vector<double> x(101);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.01 * static_cast<double>(i);
  return grad_tape(trace(
      [n, wave](const std::vector<Real>& v) {
        Real s = v[0];
        for (int i = 0; i < n; ++i) s = s * 0.5 + wave(v[(static_cast<unsigned>(i) * 2654435761u >> 7) % 101]) * (0.3 + 0.1 * s);
        return s;
      },
      x));
}
inline Real sine(const Real& t) { return sin(t); }
inline Real cosine(const Real& t) { return cos(t); }

}  // namespace reel::test
