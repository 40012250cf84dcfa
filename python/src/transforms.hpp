#pragma once
// What reel.trace and the gradient family share with the caches (jit.cpp).
#include "common.hpp"

namespace reel::py_bind {

struct PyTrace {
  Tape tape;
  std::vector<Tensor> inputs;    // the arguments' tensors, in walk order
  std::vector<Tensor> captured;  // tensors lifted from an enclosing trace (lift)
  py::object result;             // f's result as traced
  std::vector<Tensor> outputs;   // its tensors: the tape's outputs
};

// f(*args) traced (reel::trace_tensors): the arguments' tensors become the tape's
// inputs; the result's tensors its outputs: all its leaves must be tensors, unless
// plain_results (reel.jit: its plain values are kept in the structure of the result).
PyTrace trace_py(py::handle f, const py::tuple& args, bool lift, bool value_guards, const char* op,
                 bool plain_results = false);

// CompileOptions as reel.compile and reel.jit take them.
// CompileOptions from Python's keywords; `optimization` is "automatic", "full" or
// "quick" (CompileOptions::Optimization), anything else a reel.Error naming `op`.
CompileOptions compile_options(const char* op, bool vector_math, bool reuse_memory, const std::string& optimization);

std::vector<Tensor> detached(std::span<const Tensor> ts);

// Each argument rebuilt with grads[first], grads[first + 1], ... as its tensors (None
// for its plain values).
py::tuple gradients_per_arg(const py::tuple& args, std::span<const Tensor> grads, std::size_t first);

// (value, gradient of each argument): outs = [value, the gradients of the arguments'
// tensors in walk order].
py::tuple value_and_grads(const py::tuple& args, std::span<const Tensor> outs);

// A compiled call with the GIL released.
std::vector<Tensor> run_compiled(const CompiledFunction& f, std::span<const Tensor> args);

}  // namespace reel::py_bind
