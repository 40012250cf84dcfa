#pragma once
// What the GradBench evals share: reading JSON input into tensors and writing results
// back (json_io.cpp), and the function table each eval's file gives (registry.cpp
// gathers them into modules()). Each eval is ordinary Reel code, traced once per
// signature, differentiated by Reel and compiled (the cached reel::jit /
// reel::simplegrad(f), or tapes compiled in the eval's file for nested derivatives).
#include <fmt/format.h>
#include <reel/reel.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "session.hpp"

namespace gradbench::evals {

using reel::Tensor;

// ---- JSON <-> tensors (json_io.cpp) ----------------------------------------------------

// The input's field `name` (a reel::Error if there is none).
const json& field(const json& input, const char* name);

// Every integer of the input is read here: a JSON integer, or a number with no
// fractional part (2.0), within [lo, hi]; anything else (2.5, 1e30, a string, a
// number past int64) is an error quoting what was given, never truncated or wrapped.
// `what` names it for the message: "n", or "correspondences"[3]; `why_hi` says why hi.
int64_t integer_of(const json& v, std::string_view eval, const std::string& what, int64_t lo, int64_t hi,
                   std::string_view why_hi = "");
// The input's integer field `name`, as integer_of.
int64_t integer(const json& input, std::string_view eval, const char* name, int64_t lo = 0,
                int64_t hi = std::numeric_limits<int64_t>::max(), std::string_view why_hi = "");
// An array of integers (each through integer_of); `what` as for integer_of.
std::vector<int64_t> integers(const json& v, std::string_view eval, const std::string& what, int64_t lo, int64_t hi);
// The input's number field `name`.
double number(const json& input, const char* name);

// A JSON array of numbers, or of equally long arrays of numbers, as an f64 tensor.
Tensor tensor_of(const json& v, const char* name);
// The input's field `name` as a tensor.
Tensor input_tensor(const json& input, const char* name);

json scalar_json(const Tensor& t);  // its one value
json vector_json(const Tensor& t);  // its values, as one array
json matrix_json(const Tensor& t);  // rows of its first axis, each an array of numbers

// The work of most functions: each run computes a result (`compute()`: a tensor, or the
// scalar mode's Reals), and the output is the last one as JSON (`to_json`).
template <class Compute, class ToJson>
Prepared each_run(Compute compute, ToJson to_json) {
  auto out = std::make_shared<std::decay_t<decltype(compute())>>();
  return {[=] { *out = compute(); }, [=] { return to_json(*out); }};
}

// ---- the evals: function name -> maker, one file each ---------------------------------

using Functions = std::map<std::string, Maker>;

// How every function the tool answers is cached and compiled: on its first call (a
// signature is seen once before it is timed), and at LLVM's full optimisation whatever
// the program's size (CompileOptions::optimization), since GradBench times the calls
// and not the preparation. Functions compiled directly (reel::compile) take
// kJitOptions.compile.
inline const reel::JitOptions kJitOptions{.compile_after = 1,
                                          .compile = {.optimization = reel::CompileOptions::Optimization::full}};

// The input of an eval whose functions take a tensor and a count (llsq's x and n, ode's
// x and s, det's A and ell).
struct TensorAndCount {
  Tensor x;
  int64_t k;
};

// "primal" and "gradient" of such an eval: primal(x, k), compiled on its first call
// (reel::jit) and written by `primal_json`, and the gradient of scalar(x, k) with
// respect to x (reel::simplegrad). `read` reads and checks the input. (The scalar mode's
// primal and scalar take x as Reals and return Reals: primal_json takes what they return.)
template <class Primal, class Scalar, class PrimalJson>
Functions primal_and_gradient(TensorAndCount (*read)(const json&), Primal primal, PrimalJson primal_json,
                              Scalar scalar) {
  auto jitted = reel::jit(primal, kJitOptions);
  auto grad = reel::simplegrad(scalar, kJitOptions);
  auto f = std::make_shared<const decltype(jitted)>(std::move(jitted));
  auto g = std::make_shared<const decltype(grad)>(std::move(grad));
  return {{"primal",
           [=](const json& input) {
             auto in = std::make_shared<const TensorAndCount>(read(input));
             return each_run([=] { return (*f)(in->x, in->k); }, primal_json);
           }},
          {"gradient", [=](const json& input) {
             auto in = std::make_shared<const TensorAndCount>(read(input));
             return each_run([=] { return (*g)(in->x, in->k)[1]; }, vector_json);
           }}};
}

// ---- the inputs, read and checked (in the eval's file; the scalar mode reads with them too)

TensorAndCount llsq_input(const json& input);  // x, and n (the number of points)
TensorAndCount ode_input(const json& input);   // x, and s (the number of steps)
TensorAndCount det_input(const json& input);   // A (ell x ell values), and ell

// gmm's: alpha [k], mu and q [k][d], l [k][d(d-1)/2], x [n][d], and the Wishart prior's
// gamma and m.
struct GmmInput {
  Tensor alpha, mu, q, l, x;
  double gamma;
  int64_t m;
};
std::shared_ptr<GmmInput> gmm_input(const json& input);
// gmm's jacobian output: the gradients of alpha, mu, q and l.
json gmm_jacobian_json(const Tensor& alpha, const Tensor& mu, const Tensor& q, const Tensor& l);

// lstm's: main_params [2l][4b], extra_params [3][b], state [2l][b], sequence [c][b].
struct LstmInput {
  Tensor main, extra, state, sequence;
};
std::shared_ptr<LstmInput> lstm_input(const json& input);
// lstm's jacobian output: the gradients of main_params and extra_params, as one array.
json lstm_jacobian_json(const Tensor& main, const Tensor& extra);

Functions hello_functions();   // hello.cpp
Functions lse_functions();     // lse.cpp
Functions llsq_functions();    // llsq.cpp
Functions ode_functions();     // ode.cpp
Functions kmeans_functions();  // kmeans.cpp
Functions gmm_functions();     // gmm.cpp
Functions lstm_functions();    // lstm.cpp
Functions ba_functions();      // ba.cpp
Functions det_functions();     // det.cpp
Functions ht_functions();      // ht.cpp

}  // namespace gradbench::evals
