// The extension module reel._reel; the package reel (python/reel/__init__.py) is its
// public face.
#include "common.hpp"

namespace reel::py_bind {
thread_local int gil_released_depth = 0;
}

PYBIND11_MODULE(_reel, m) {
  namespace py = pybind11;
  using namespace reel::py_bind;
  m.doc() = "Reel's C++ core for Python: tensors, operations, tracing, derivatives and compiled code.";
  // reel::Error as reel.Error, reel::GuardFailure as its subclass reel.GuardFailure (the
  // translator registered last runs first, so a GuardFailure stays one).
  // (Never freed: the translator may run until the interpreter ends.)
  static PyObject* error = (new py::exception<reel::Error>(m, "Error", PyExc_RuntimeError))->ptr();
  static PyObject* guard_failure = (new py::exception<reel::GuardFailure>(m, "GuardFailure", error))->ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const reel::GuardFailure& e) {
      PyErr_SetString(guard_failure, e.what());
    } catch (const reel::Error& e) {
      PyErr_SetString(error, e.what());
    }
  });
  bind_tensor(m);
  bind_ops(m);
  bind_transforms(m);
  bind_jit(m);
  bind_custom(m);
  bind_loops(m);
  m.def("set_num_threads", &reel::set_num_threads, py::arg("n"),
        "Threads compiled code uses (REEL_NUM_THREADS; default: every core).");
  m.def("num_threads", &reel::num_threads);
  m.def("_gil_released", [] { return gil_released_depth > 0; },
        "True inside a Python rule called from code that runs with the GIL released (tests).");
}
