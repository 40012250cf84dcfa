#pragma once
// The Python package's C++ side (module reel._reel), shared by its files: tensors from
// and to NumPy, Python trees of tensors (pytrees), and cache keys of Python arguments.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cxxabi.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "reel/reel.hpp"

namespace reel::py_bind {

namespace py = pybind11;

// An object of a class bound here made by Class.__new__ without __init__ (so without
// its C++ object): no entry point may use it. False for anything else.
bool uninitialised(py::handle h);

// pybind11's loading of a bound class's object, refusing an uninitialised one. Every
// argument (self too) of every bound function is loaded by it, so an uninitialised
// object is a mismatch, which the module reports as a reel.Error naming the call, what
// it expects and what it was given (module.cpp).
template <class T>
struct InitialisedCaster : py::detail::type_caster_base<T> {
  bool load(py::handle src, bool convert) {
    return !uninitialised(src) && py::detail::type_caster_base<T>::load(src, convert);
  }
};

}  // namespace reel::py_bind

// Every class bound here loads through InitialisedCaster: in every file before any use
// (the ones bound in one file, CompiledGrad and JitFunction, in that file).
#define REEL_INITIALISED_CASTER(T)                                                \
  namespace pybind11::detail {                                                    \
  template <>                                                                     \
  class type_caster<T> : public reel::py_bind::InitialisedCaster<T> {};          \
  }
REEL_INITIALISED_CASTER(reel::Tensor)
REEL_INITIALISED_CASTER(reel::Tape)
REEL_INITIALISED_CASTER(reel::CompiledFunction)
REEL_INITIALISED_CASTER(reel::CacheInfo)
REEL_INITIALISED_CASTER(reel::DType)

namespace reel::py_bind {

// f32, f64, i64 from reel.f32/f64/i64 (the DType enum), a string ("f32", "float32",
// "f64", "float64", "i64", "int64") or a NumPy dtype; a reel.Error naming `op` otherwise.
DType to_dtype(py::handle h, const char* op);

// A reel.Tensor's tensor; a NumPy array seen as a tensor (without a copy when it is a
// C-contiguous, aligned f32, f64 or i64 array in native byte order; other arrays are
// converted: other integers and booleans to i64... see tensor.cpp); nothing else.
// The name of a Python object's type, for messages ("uninitialised Tensor (made by
// Tensor.__new__ without __init__)" for such an object).
std::string type_name(py::handle h);
// A Python object as messages show what was given: its repr (truncated), or its
// type_name when uninitialised (whose repr refuses it).
std::string shown(py::handle h);

// Python values as C++ parameters, each a reel.Error naming `op` and the parameter
// `what` otherwise: an integer (a Python or NumPy integer, not a bool) that fits in 64
// bits; an int or a list or tuple of them; a number (int, float, NumPy scalar) as a double.
py::int_ to_pyint(py::handle h, const char* op, const char* what);  // any size
int64_t to_int(py::handle h, const char* op, const char* what);
std::vector<int64_t> to_ints(py::handle h, const char* op, const char* what);
// A list, a tuple or a one-dimensional NumPy array: what to_ints takes as several ints.
bool is_sequence(py::handle h);
bool is_number(py::handle h);
double to_double(py::handle h, const char* op, const char* what);

bool is_tensor_like(py::handle h);
// The tensor of a reel.Tensor, without pybind11's type lookup (calls are hot); null
// for anything else.
const Tensor* tensor_of(py::handle h);
Tensor as_tensor(py::handle h, const char* op);
// The tensor of a reel.Tensor (a reel.Error naming `op` for anything else, such as an
// uninitialised one).
const Tensor& tensor_ref(py::handle h, const char* op);
// A Tensor as a Python object, None for an undefined one.
py::object to_py(const Tensor& t);
py::list to_list(std::span<const Tensor> ts);

// Pytrees: tensors (and NumPy arrays) are leaves; dicts, lists and tuples (named tuples
// too) are walked; anything else is a plain value (an uninitialised object is a
// reel.Error naming `op`).
void flatten(py::handle tree, std::vector<Tensor>& leaves, const char* op);
// `like` rebuilt with leaves[next], leaves[next + 1], ... in place of its tensors; its
// plain values kept, or None with plain_to_none (the gradient of a plain value).
py::object rebuild(py::handle like, std::span<const Tensor> leaves, std::size_t& next, bool plain_to_none);
// The leaves of a function's result, which must all be tensors (`op` names the call).
std::vector<Tensor> result_tensors(py::handle result, const char* op);

// A cache key of Python arguments: each tensor's dtype and shape, each plain value
// (None, bool, int, float, str) with its type, and the shape of containers. The
// tensors are collected in walk order. A reel.Error naming `op` for other values.
void append_key(CacheKey& key, py::handle arg, std::vector<Tensor>& tensors, const char* op,
                std::size_t argno);
// The key of a call's arguments (append_key of each, numbered from 1).
void append_args_key(CacheKey& key, const py::tuple& args, std::vector<Tensor>& tensors, const char* op);
// The argument as text, for REEL_LOG=recompiles; describe_all: each of a call's.
std::string describe(py::handle arg);
std::vector<std::string> describe_all(const py::tuple& args);

// Compiled (or interpreted) code runs with the GIL released: this releases it and marks
// the thread, so that a Python rule called from that code (which takes the GIL back)
// can tell (reel._reel._gil_released(), for the tests).
// At exit, taking the GIL back ends a daemon thread with a forced unwind (CPython's
// pthread_exit), which would run on into pybind11's and Python's frames, freeing Python
// objects without the GIL, and crash the exit: such a thread is parked instead (it never
// returns; the process ends around it). Both ways of taking the GIL back go through
// take_gil_back.
[[noreturn]] void park_exiting_thread();
template <class F>
void take_gil_back(F&& take) noexcept {
  try {
    take();
  } catch (abi::__forced_unwind&) {
    park_exiting_thread();
  }
}
extern thread_local int gil_released_depth;
struct ReleaseGil {
  PyThreadState* state;
  ReleaseGil() : state(PyEval_SaveThread()) { ++gil_released_depth; }
  ~ReleaseGil() {
    --gil_released_depth;
    take_gil_back([&] { PyEval_RestoreThread(state); });
  }
  ReleaseGil(const ReleaseGil&) = delete;
  ReleaseGil& operator=(const ReleaseGil&) = delete;
};
// py::gil_scoped_acquire, from a thread that may be a daemon thread at exit (a Python rule
// or a NumPy array's release called from compiled code).
struct AcquireGil {
  std::optional<py::gil_scoped_acquire> gil;
  AcquireGil() {
    take_gil_back([&] { gil.emplace(); });
  }
};

// Guards a recursive walk of a Python tree: a cycle or a tree nested deeper than
// kMaxDepth (whatever sys.getrecursionlimit says: the walk runs on the C stack) is
// Python's RecursionError, not a stack overflow.
struct WalkDepth {
  static constexpr int kMaxDepth = 1000;
  static thread_local int depth;
  WalkDepth() {
    if (depth >= kMaxDepth) {
      PyErr_Format(PyExc_RecursionError, "reel: a tree of arguments nested deeper than %d (or a cycle)", kMaxDepth);
      throw py::error_already_set();
    }
    if (Py_EnterRecursiveCall(" while reel walked a tree of arguments")) throw py::error_already_set();
    ++depth;
  }
  ~WalkDepth() {
    --depth;
    Py_LeaveRecursiveCall();
  }
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
