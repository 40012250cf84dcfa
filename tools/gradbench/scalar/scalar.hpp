#pragma once
// The scalar mode (reel-gradbench --scalar): lse, llsq, ode, det, gmm and lstm answered
// by GradBench's own templated C++ objectives (../shared/gradbench-cpp, unchanged),
// instantiated with reel::Real, one file per eval here. Each traced function takes the
// differentiated arguments as std::vector<reel::Real> (given the input's tensors), calls
// the unmodified template through reel::output / reel::outputs (the peers' output-pointer
// form), and is cached and compiled as the tensor mode's are (reel::jit, and
// reel::simplegrad for the derivative, compiled on the first call). Inputs are read and
// checked, and outputs written, as the tensor mode does (evals/).
//
// Each file includes its GradBench header inside an unnamed namespace (see
// gradbench_prelude.hpp): the headers define non-inline functions (from_json,
// generic_main, num_threads, specialisations for double), which then stay local to
// that file, so that the six link into one program.
#include <cstdint>
#include <string>
#include <vector>

#include "evals/evals.hpp"

namespace gradbench::scalar {

using evals::Functions;
using reel::Real;
using reel::Tensor;

// A Real result as JSON.
inline json real_json(const Real& x) { return x.value(); }

// How many operations an eval's scalar trace of an input records (a rough estimate from
// its sizes; a gradient's trace adds about twice as many):
// the replay tool skips inputs over its --max-ops.
using Estimate = int64_t (*)(const json& input);

struct ScalarEval {
  Functions functions;
  Estimate operations;
};

ScalarEval lse_eval();   // lse.cpp
ScalarEval llsq_eval();  // llsq.cpp
ScalarEval ode_eval();   // ode.cpp
ScalarEval det_eval();   // det.cpp
ScalarEval gmm_eval();   // gmm.cpp
ScalarEval lstm_eval();  // lstm.cpp

}  // namespace gradbench::scalar
