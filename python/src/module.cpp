// The extension module reel._reel; the package reel (python/reel/__init__.py) is its
// public face.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include "common.hpp"

namespace reel::py_bind {
thread_local int gil_released_depth = 0;

void park_exiting_thread() {
  for (;;) pause();
}
thread_local int WalkDepth::depth = 0;

namespace {

PyObject* error_type = nullptr;  // reel.Error

// pybind11's dispatcher (the same for every bound function) and ours around it: a call
// whose arguments match none of the function's signatures (a wrong type, an int beyond
// 64 bits, an uninitialised object) is a reel.Error naming the function, what it
// expects and what it was given, in place of pybind11's TypeError.
PyCFunctionWithKeywords pybind11_dispatcher = nullptr;

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// "(self: reel._reel.Tensor, x: int) -> reel._reel.Tensor" as "(self: reel.Tensor, x: int)".
std::string signature_text(const char* signature, bool constructor) {
  std::string s = signature;
  const std::size_t ret = s.rfind(" -> ");
  if (ret != std::string::npos) s.erase(ret);
  replace_all(s, "reel._reel.", "reel.");
  replace_all(s, ": handle", ": object");  // a parameter converted by the function itself
  if (constructor) {  // the object being made is not the caller's argument
    const std::size_t self = s.find("self: ");
    const std::size_t end = s.find_first_of(",)", self);
    if (self != std::string::npos && end != std::string::npos) s.erase(self, end + (s[end] == ',' ? 2 : 0) - self);
  }
  return s;
}

// One given argument, as the message shows it: numbers and strings by value (an int
// beyond 64 bits says so), tensors by type, lists and tuples by their first items,
// anything else by its type's name.
std::string given_text(py::handle h) {
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    const WalkDepth depth;
    const bool list = py::isinstance<py::list>(h);
    std::string items;
    std::size_t i = 0;
    for (py::handle item : h) {
      if (i++ == 4) {
        items += ", ...";
        break;
      }
      items += (items.empty() ? "" : ", ") + given_text(item);
    }
    return list ? "[" + items + "]" : "(" + items + (i == 1 ? ",)" : ")");
  }
  if (const Tensor* t = tensor_of(h)) return fmt::format("reel.Tensor {}", type_str(t->dtype(), t->shape()));
  if (PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr())) {
    int overflow = 0;
    (void)PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    std::string v = py::str(h);
    if (v.size() > 40) v = v.substr(0, 20) + "..." + v.substr(v.size() - 5);
    return overflow ? v + " (beyond 64 bits)" : v;
  }
  if (PyBool_Check(h.ptr()) || PyFloat_Check(h.ptr()) || h.is_none() || py::isinstance<py::str>(h)) return shown(h);
  return type_name(h);
}

std::string call_name(const py::detail::function_record& rec) {
  std::string name = rec.name;
  if (rec.scope && PyType_Check(rec.scope.ptr())) {
    const std::string type = py::str(rec.scope.attr("__name__"));
    return rec.is_constructor ? type : type + "." + name;
  }
  return name;
}

// pybind11's "f(): incompatible function arguments" TypeError of this very call (not
// one raised inside it, which has a traceback) becomes the reel.Error.
void explain_mismatch(PyObject* capsule, PyObject* args, PyObject* kwargs) {
  PyObject *type, *value, *trace;
  PyErr_Fetch(&type, &value, &trace);
  auto* rec = static_cast<py::detail::function_record*>(
      PyCapsule_GetPointer(capsule, py::detail::get_function_record_capsule_name()));
  bool ours = false;
  if (rec != nullptr && trace == nullptr && value != nullptr) {
    PyErr_NormalizeException(&type, &value, &trace);
    PyObject* text = PyObject_Str(value);
    const char* s = text ? PyUnicode_AsUTF8(text) : nullptr;
    ours = s != nullptr && std::string_view(s).starts_with(std::string(rec->name) + "(): incompatible ");
    Py_XDECREF(text);
    PyErr_Clear();
  }
  if (!ours) {
    PyErr_Restore(type, value, trace);
    return;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(trace);
  std::string message;
  try {
    std::string expected;
    for (const py::detail::function_record* r = rec; r != nullptr; r = r->next)
      expected += (expected.empty() ? "" : " or ") + signature_text(r->signature, rec->is_constructor);
    std::string given;
    const py::tuple a = py::reinterpret_borrow<py::tuple>(args);
    for (std::size_t i = rec->is_constructor ? 1 : 0; i < a.size(); ++i)
      given += (given.empty() ? "" : ", ") + given_text(a[i]);
    if (kwargs != nullptr)
      for (auto item : py::reinterpret_borrow<py::dict>(kwargs))
        given += fmt::format("{}{}={}", given.empty() ? "" : ", ", std::string(py::str(item.first)),
                             given_text(item.second));
    message = fmt::format("{}: expected arguments {}, got ({})", call_name(*rec), expected, given);
  } catch (py::error_already_set& e) {
    e.restore();
    return;
  }
  PyErr_SetString(error_type, message.c_str());
}

// pybind11 ignores __init__ called again on an initialised object (its C++ object
// cannot change): a reel.Error here, not a call that silently does nothing.
bool initialised_again(PyObject* capsule, PyObject* args) {
  auto* rec = static_cast<py::detail::function_record*>(
      PyCapsule_GetPointer(capsule, py::detail::get_function_record_capsule_name()));
  if (rec == nullptr || PyTuple_GET_SIZE(args) == 0) return false;
  py::handle self = PyTuple_GET_ITEM(args, 0);
  if (!PyObject_TypeCheck(self.ptr(), reinterpret_cast<PyTypeObject*>(py::detail::get_internals().instance_base)))
    return false;
  for (const auto& vh : py::detail::values_and_holders(reinterpret_cast<py::detail::instance*>(self.ptr())))
    if (!vh.holder_constructed()) return false;
  PyErr_SetString(error_type, fmt::format("{}.__init__: expected an object made by {}.__new__, got one already "
                                          "initialised (its C++ object never changes: make a new one)",
                                          call_name(*rec), call_name(*rec))
                                  .c_str());
  return true;
}

extern "C" PyObject* checked_dispatch(PyObject* self, PyObject* args, PyObject* kwargs) {
  PyObject* result = pybind11_dispatcher(self, args, kwargs);
  if (result == nullptr && PyErr_ExceptionMatches(PyExc_TypeError)) explain_mismatch(self, args, kwargs);
  return result;
}

// The same for a constructor (__init__).
extern "C" PyObject* checked_init_dispatch(PyObject* self, PyObject* args, PyObject* kwargs) {
  if (initialised_again(self, args)) return nullptr;
  return checked_dispatch(self, args, kwargs);
}

// A bound function (or a method, property or static method wrapping one): its calls go
// through checked_dispatch. A property's functions, which pybind11 leaves unnamed, are
// named after it (the messages say Tensor.shape).
void check_calls(py::handle f, const std::string& name) {
  if (!f || f.is_none()) return;
  if (PyInstanceMethod_Check(f.ptr())) return check_calls(PyInstanceMethod_GET_FUNCTION(f.ptr()), name);
  if (py::isinstance<py::staticmethod>(f)) return check_calls(f.attr("__func__"), name);
  if (PyObject_TypeCheck(f.ptr(), &PyProperty_Type)) {
    check_calls(f.attr("fget"), name);
    check_calls(f.attr("fset"), name);
    return;
  }
  if (!PyCFunction_Check(f.ptr())) return;
  PyObject* capsule = PyCFunction_GET_SELF(f.ptr());
  if (capsule == nullptr || !PyCapsule_CheckExact(capsule) ||
      PyCapsule_GetName(capsule) != py::detail::get_function_record_capsule_name())
    return;
  auto* rec = static_cast<py::detail::function_record*>(
      PyCapsule_GetPointer(capsule, py::detail::get_function_record_capsule_name()));
  PyMethodDef* def = rec->def;
  auto meth = reinterpret_cast<PyCFunctionWithKeywords>(reinterpret_cast<void (*)()>(def->ml_meth));
  if (meth == checked_dispatch || meth == checked_init_dispatch) return;
  if (pybind11_dispatcher == nullptr) pybind11_dispatcher = meth;
  if (meth != pybind11_dispatcher) return;  // not pybind11's
  if (rec->name == nullptr || rec->name[0] == '\0') {  // pybind11 frees it with std::free
    std::free(rec->name);
    rec->name = strdup(name.c_str());
    def->ml_name = rec->name;
  }
  def->ml_meth = reinterpret_cast<PyCFunction>(
      reinterpret_cast<void (*)()>(rec->is_constructor ? checked_init_dispatch : checked_dispatch));
}

void check_all_calls(py::module_& m) {
  for (auto item : m.attr("__dict__").cast<py::dict>()) {
    check_calls(item.second, py::str(item.first));
    if (PyType_Check(item.second.ptr()))
      for (auto member : item.second.attr("__dict__").cast<py::dict>()) check_calls(member.second, py::str(member.first));
  }
}

}  // namespace
}  // namespace reel::py_bind

PYBIND11_MODULE(_reel, m) {
  namespace py = pybind11;
  using namespace reel::py_bind;
  m.doc() = "Reel's C++ core for Python: tensors, operations, tracing, derivatives and compiled code.";
  // reel::Error as reel.Error, reel::GuardFailure as its subclass reel.GuardFailure (the
  // translator registered last runs first, so a GuardFailure stays one).
  // (Never freed: the translator may run until the interpreter ends.)
  static PyObject* error = (new py::exception<reel::Error>(m, "Error", PyExc_RuntimeError))->ptr();
  static PyObject* guard_failure = (new py::exception<reel::GuardFailure>(m, "GuardFailure", error))->ptr();
  error_type = error;
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
  check_all_calls(m);
}
