#pragma once
// The Python package's C++ side (module reel._reel), shared by its files: tensors from
// and to NumPy, Python trees of tensors (pytrees), and cache keys of Python arguments.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reel/reel.hpp"

namespace reel::py_bind {

namespace py = pybind11;

// f32, f64, i64 from reel.f32/f64/i64 (the DType enum), a string ("f32", "float32",
// "f64", "float64", "i64", "int64") or a NumPy dtype; a reel.Error naming `op` otherwise.
DType to_dtype(py::handle h, const char* op);

// A reel.Tensor's tensor; a NumPy array seen as a tensor (without a copy when it is a
// C-contiguous, aligned f32, f64 or i64 array in native byte order; other arrays are
// converted: other integers and booleans to i64... see tensor.cpp); nothing else.
// The name of a Python object's type, for messages.
std::string type_name(py::handle h);

bool is_tensor_like(py::handle h);
// The tensor of a reel.Tensor, without pybind11's type lookup (calls are hot); null
// for anything else.
const Tensor* tensor_of(py::handle h);
Tensor as_tensor(py::handle h, const char* op);
// A Tensor as a Python object, None for an undefined one.
py::object to_py(const Tensor& t);
py::list to_list(std::span<const Tensor> ts);

// Pytrees: tensors (and NumPy arrays) are leaves; dicts, lists and tuples (named tuples
// too) are walked; anything else is a plain value.
void flatten(py::handle tree, std::vector<Tensor>& leaves);
// `like` rebuilt with leaves[next], leaves[next + 1], ... in place of its tensors; its
// plain values kept, or None with plain_to_none (the gradient of a plain value).
py::object rebuild(py::handle like, std::span<const Tensor> leaves, std::size_t& next, bool plain_to_none);
// The leaves of a function's result, which must all be tensors (`op` names the call).
std::vector<Tensor> result_tensors(py::handle result, const char* op);

// A cache key of Python arguments: each tensor's dtype and shape, each plain value
// (None, bool, int, float, str) with its type, and the shape of containers. The
// tensors are collected in walk order. A reel.Error naming `op` for other values.
void append_key(detail::KeyBuffer& key, py::handle arg, std::vector<Tensor>& tensors, const char* op,
                std::size_t argno);
// The key of a call's arguments (append_key of each, numbered from 1).
void append_args_key(detail::KeyBuffer& key, const py::tuple& args, std::vector<Tensor>& tensors, const char* op);
// The argument as text, for REEL_LOG=recompiles; describe_all: each of a call's.
std::string describe(py::handle arg);
std::vector<std::string> describe_all(const py::tuple& args);

// Compiled (or interpreted) code runs with the GIL released: this releases it and marks
// the thread, so that a Python rule called from that code (which takes the GIL back)
// can tell (reel._reel._gil_released(), for the tests).
// (Its destructor may throw: at exit, taking the GIL back ends a daemon thread with a
// forced unwind, which a noexcept destructor would turn into std::terminate.)
extern thread_local int gil_released_depth;
struct ReleaseGil {
  PyThreadState* state;
  ReleaseGil() : state(PyEval_SaveThread()) { ++gil_released_depth; }
  ~ReleaseGil() noexcept(false) {
    --gil_released_depth;
    PyEval_RestoreThread(state);
  }
  ReleaseGil(const ReleaseGil&) = delete;
  ReleaseGil& operator=(const ReleaseGil&) = delete;
};

// Guards a recursive walk of a Python tree: a cycle or a tree too deep is Python's
// RecursionError, not a stack overflow.
struct WalkDepth {
  WalkDepth() {
    if (Py_EnterRecursiveCall(" while reel walked a tree of arguments")) throw py::error_already_set();
  }
  ~WalkDepth() { Py_LeaveRecursiveCall(); }
  WalkDepth(const WalkDepth&) = delete;
  WalkDepth& operator=(const WalkDepth&) = delete;
};

void bind_tensor(py::module_& m);
void bind_ops(py::module_& m);
void bind_transforms(py::module_& m);
void bind_jit(py::module_& m);
void bind_custom(py::module_& m);
void bind_loops(py::module_& m);

// A Python object held by C++ (a cached result's structure, a user's rule), released
// with the GIL held, and never after the interpreter has finished.
std::shared_ptr<py::object> hold(py::object o);

}  // namespace reel::py_bind
