#pragma once
// What reel.trace and the gradient family share with the caches (jit.cpp).
#include "common.hpp"

namespace reel::py_bind {

struct PyTrace {
  Tape tape;
  std::vector<Tensor> inputs;    // the arguments' tensors, in walk order
  std::vector<Tensor> captured;  // tensors lifted from an enclosing trace (lift)
  py::object result;             // f's result as traced
};

// f(*args) traced: the arguments' tensors become the tape's inputs; the result's
// tensors (all its leaves must be) its outputs. lift and value_guards as
// detail::TraceScope's.
PyTrace trace_py(py::handle f, const py::tuple& args, bool lift, bool value_guards, const char* op);

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
