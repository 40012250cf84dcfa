// reel.Tensor and NumPy: arrays seen as tensors without a copy (the tensor keeps the
// array alive), tensors seen as read-only arrays without a copy (the array keeps the
// tensor alive), and the creation functions.
#include <fmt/format.h>

#include <cstring>

#include "common.hpp"

namespace reel::py_bind {

namespace {

// The NumPy dtype of a Reel dtype.
py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::f32: return py::dtype::of<float>();
    case DType::f64: return py::dtype::of<double>();
    case DType::i64: return py::dtype::of<int64_t>();
  }
  return py::dtype::of<double>();
}

// The Reel dtype of an array's, if it has one.
std::optional<DType> reel_dtype(const py::dtype& d) {
  if (d.kind() == 'f' && d.itemsize() == 8) return DType::f64;
  if (d.kind() == 'f' && d.itemsize() == 4) return DType::f32;
  if (d.kind() == 'i' && d.itemsize() == 8) return DType::i64;
  return std::nullopt;
}

Shape shape_of(const py::array& a) {
  Shape s(static_cast<std::size_t>(a.ndim()));
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s[static_cast<std::size_t>(i)] = a.shape(i);
  return s;
}

// A tensor over the array's memory (kept alive by the tensor), or a copy when the array
// is not C-contiguous, aligned and native, or has another dtype (integers and booleans
// become i64, other floats f64).
Tensor from_array(py::array a, const char* op) {
  std::optional<DType> t = reel_dtype(a.dtype());
  bool convert = !t;
  if (!t) {
    const char kind = a.dtype().kind();
    if (kind == 'i' || kind == 'u' || kind == 'b') t = DType::i64;
    else if (kind == 'f') t = DType::f64;
    else
      throw Error(fmt::format("{}: expected a float32, float64 or int64 array (or other integers, booleans or "
                              "floats, converted), got a NumPy array of dtype {}",
                              op, std::string(py::str(a.dtype()))));
  }
  if (a.dtype().kind() == 'u' && a.itemsize() == 8 && a.size() > 0) {
    // uint64 values from 2**63 would wrap to negative i64 values.
    py::object top = a.attr("max")();
    if (top.cast<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw Error(fmt::format("{}: expected uint64 values that fit in i64 (at most 2**63 - 1), got {}", op,
                              std::string(py::str(top))));
  }
  const bool aligned = reinterpret_cast<std::uintptr_t>(a.data()) % static_cast<std::uintptr_t>(a.itemsize()) == 0;
  if (convert || !(a.flags() & py::array::c_style) || !aligned || !a.dtype().attr("isnative").cast<bool>()) {
    py::module_ np = py::module_::import("numpy");
    a = np.attr("array")(a, py::arg("dtype") = numpy_dtype(*t), py::arg("order") = "C").cast<py::array>();
  }
  const void* data = a.data();
  Shape shape = shape_of(a);
  PyObject* owner = a.release().ptr();
  std::shared_ptr<void> storage(const_cast<void*>(data), [owner](void*) {
    if (!Py_IsInitialized()) return;  // the interpreter is gone: nothing to release
    const AcquireGil gil;
    Py_DECREF(owner);
  });
  return Tensor::adopt(std::move(storage), *t, std::move(shape));
}

// Values read while the tensor is traced for a cache become a guard on them, as item()
// and values() do (C++'s Tensor::values records the read).
void read_values(const Tensor& t) {
  if (!t.trace_tags().empty()) (void)t.values();
}

// A read-only array over the tensor's memory, keeping `self` (the reel.Tensor) alive.
py::array to_array(const Tensor& t, py::handle self) {
  if (!t.defined()) throw Error("numpy: the tensor is undefined");
  read_values(t);
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  py::array a(numpy_dtype(t.dtype()), shape, {}, t.raw(), self);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

// The buffer protocol (memoryview(t); NumPy's first try): pybind11's def_buffer would
// dereference nothing for an uninitialised tensor and let a C++ exception (an undefined
// tensor, a guard) escape a C callback, which is std::terminate. Here every error is a
// Python error, translated as pybind11 translates a bound function's.
extern "C" int tensor_getbuffer(PyObject* obj, Py_buffer* view, int flags) {
  if (view == nullptr) {
    PyErr_SetString(PyExc_BufferError, "buffer: no view to fill");
    return -1;
  }
  view->obj = nullptr;
  try {
    const Tensor& t = tensor_ref(obj, "buffer");
    if (!t.defined()) throw Error("buffer: the tensor is undefined");
    if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE)
      throw py::buffer_error("buffer: expected a read-only buffer request, got a writable one (tensors never change)");
    read_values(t);
    std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides(shape.size());
    py::ssize_t size = static_cast<py::ssize_t>(dtype_size(t.dtype()));
    for (std::size_t i = shape.size(); i-- > 0;) strides[i] = size, size *= shape[i];
    const char* format = t.dtype() == DType::f32 ? "f" : t.dtype() == DType::f64 ? "d" : "q";
    auto* info = new py::buffer_info(const_cast<void*>(t.raw()), static_cast<py::ssize_t>(dtype_size(t.dtype())),
                                     format, static_cast<py::ssize_t>(shape.size()), shape, strides, /*readonly=*/true);
    std::memset(view, 0, sizeof(Py_buffer));
    view->obj = obj;
    view->internal = info;  // deleted by pybind11_releasebuffer, the slot's other half
    view->buf = info->ptr;
    view->itemsize = info->itemsize;
    view->len = size;
    view->readonly = 1;
    view->ndim = 1;
    if ((flags & PyBUF_FORMAT) == PyBUF_FORMAT) view->format = const_cast<char*>(info->format.c_str());
    if ((flags & PyBUF_STRIDES) == PyBUF_STRIDES) {
      view->ndim = static_cast<int>(info->ndim);
      view->strides = info->strides.data();
      view->shape = info->shape.data();
    }
    Py_INCREF(obj);
    return 0;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (...) {
    if (!py::detail::apply_exception_translators(py::detail::get_local_internals().registered_exception_translators) &&
        !py::detail::apply_exception_translators(py::detail::get_internals().registered_exception_translators))
      PyErr_SetString(PyExc_RuntimeError, "buffer: an unknown C++ exception");
  }
  return -1;
}

// Values from a Python number, nested list or array, as a NumPy array of `dtype`; when
// not given, an array keeps its dtype and Python numbers are f64 (as reel::tensor's).
// NumPy's refusal (a string, ragged lists, an integer too large for i64) is a
// reel.Error naming `op`.
py::array values_array(py::handle values, std::optional<DType> dtype, const char* op) {
  py::module_ np = py::module_::import("numpy");
  if (!dtype && !py::isinstance<py::array>(values)) dtype = DType::f64;
  try {
    if (dtype) return np.attr("array")(values, numpy_dtype(*dtype)).cast<py::array>();
    return np.attr("array")(values).cast<py::array>();
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_ValueError) && !e.matches(PyExc_TypeError) && !e.matches(PyExc_OverflowError)) throw;
    throw Error(fmt::format("{}: expected a number, a nested list of numbers or an array, got {} ({})", op,
                            shown(values), std::string(py::str(e.value()))));
  }
}

// A random generator's seed: an integer from 0 to 2**64 - 1.
uint64_t seed_of(py::handle h, const char* op) {
  const py::int_ i = to_pyint(h, op, "seed");
  const unsigned long long v = PyLong_AsUnsignedLongLong(i.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw Error(fmt::format("{}: expected a seed from 0 to 2**64 - 1, got {}", op, std::string(py::str(py::handle(i)))));
  }
  return v;
}

std::optional<DType> optional_dtype(py::handle h, const char* op) {
  if (h.is_none()) return std::nullopt;
  return to_dtype(h, op);
}

// reel.tensor(values[, shape][, dtype]): a copy.
Tensor make_tensor(py::handle values, py::handle shape, py::handle dtype) {
  const std::optional<DType> t = optional_dtype(dtype, "tensor");
  Tensor src = py::isinstance<Tensor>(values) ? tensor_ref(values, "tensor")
                                              : from_array(values_array(values, t, "tensor"), "tensor");
  if (t && src.dtype() != *t) src = cast(src, *t);
  Tensor out(src.dtype(), src.shape());
  if (src.nbytes() > 0) std::memcpy(out.mutable_raw(), src.raw(), src.nbytes());
  if (!shape.is_none()) {
    const Shape s = to_ints(shape, "tensor", "shape");
    if (numel(s, "tensor") != out.numel())
      throw Error(fmt::format("tensor: {} values do not fill shape {}", out.numel(), shape_str(s)));
    out = out.reshaped(s);
  }
  return out;
}

}  // namespace

DType to_dtype(py::handle h, const char* op) {
  if (py::isinstance<DType>(h) && !uninitialised(h)) return h.cast<DType>();
  if (py::isinstance<py::str>(h)) {
    const std::string s = h.cast<std::string>();
    if (s == "f32" || s == "float32") return DType::f32;
    if (s == "f64" || s == "float64") return DType::f64;
    if (s == "i64" || s == "int64") return DType::i64;
    throw Error(fmt::format("{}: expected a dtype (reel.f32, reel.f64, reel.i64, or 'float32', 'float64', "
                            "'int64'), got '{}'",
                            op, s));
  }
  try {
    py::dtype d = py::dtype::from_args(py::reinterpret_borrow<py::object>(h));
    if (auto t = reel_dtype(d)) return *t;
  } catch (const py::error_already_set&) {
  }
  throw Error(fmt::format("{}: expected a dtype (reel.f32, reel.f64, reel.i64, a string or a NumPy dtype), got {}",
                          op, shown(h)));
}

namespace {
PyTypeObject* tensor_type = nullptr;  // reel.Tensor, set when it is bound
}

const Tensor* tensor_of(py::handle h) {
  PyTypeObject* t = Py_TYPE(h.ptr());
  if (t != tensor_type && !PyType_IsSubtype(t, tensor_type)) return nullptr;
  if (uninitialised(h)) return nullptr;
  return static_cast<const Tensor*>(reinterpret_cast<py::detail::instance*>(h.ptr())->get_value_and_holder().value_ptr());
}

bool is_tensor_like(py::handle h) { return tensor_of(h) != nullptr || py::isinstance<py::array>(h); }

const Tensor& tensor_ref(py::handle h, const char* op) {
  if (const Tensor* t = tensor_of(h)) return *t;
  throw Error(fmt::format("{}: expected a reel.Tensor, got {}", op, type_name(h)));
}

Tensor as_tensor(py::handle h, const char* op) {
  if (const Tensor* t = tensor_of(h)) return *t;
  if (py::isinstance<py::array>(h)) return from_array(py::reinterpret_borrow<py::array>(h), op);
  throw Error(fmt::format("{}: expected a reel.Tensor or a NumPy array, got {}", op, type_name(h)));
}

py::object to_py(const Tensor& t) {
  if (!t.defined()) return py::none();
  return py::cast(t);
}

py::list to_list(std::span<const Tensor> ts) {
  py::list out;
  for (const Tensor& t : ts) out.append(to_py(t));
  return out;
}

std::shared_ptr<py::object> hold(py::object o) {
  return std::shared_ptr<py::object>(new py::object(std::move(o)), [](py::object* p) {
    if (!Py_IsInitialized()) {  // the interpreter is gone: leak the reference
      p->release();
      delete p;
      return;
    }
    const AcquireGil gil;
    delete p;
  });
}

namespace {

// reel.DType and its names (f32, float32, ...).
void bind_dtypes(py::module_& m) {
  py::enum_<DType>(m, "DType", "A tensor's element type: f32, f64 or i64 (indices).")
      .value("f32", DType::f32)
      .value("f64", DType::f64)
      .value("i64", DType::i64)
      .def("__str__", [](DType t) { return std::string(dtype_name(t)); });
  m.attr("f32") = DType::f32;
  m.attr("f64") = DType::f64;
  m.attr("i64") = DType::i64;
  m.attr("float32") = DType::f32;
  m.attr("float64") = DType::f64;
  m.attr("int64") = DType::i64;
}

// reel.Tensor: its constructor, NumPy views, properties and conversions.
void bind_tensor_class(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", py::buffer_protocol(), R"(A dense, row-major f32, f64 or i64 array.

reel.Tensor(array) shares a NumPy array's memory (C-contiguous float32, float64 or
int64; other arrays are copied); numpy.asarray(t) and t.numpy() share the tensor's
memory as a read-only array. Tensors never change once made; operations make new ones.)")
      .def(py::init([](py::handle a) {
             if (py::isinstance<Tensor>(a)) return tensor_ref(a, "Tensor");
             if (py::isinstance<py::array>(a)) return as_tensor(a, "Tensor");
             return make_tensor(a, py::none(), py::none());
           }),
           py::arg("values"))
      .def("numpy", [](py::handle self) { return to_array(tensor_ref(self, "Tensor.numpy"), self); },
           "A read-only NumPy array over the tensor's memory (no copy).")
      .def("__array__",
           [](py::object self, py::object dtype) -> py::object {
             py::array a = to_array(tensor_ref(self, "Tensor.__array__"), self);
             if (dtype.is_none()) return a;
             return a.attr("astype")(dtype);
           },
           py::arg("dtype") = py::none())
      .def_property_readonly("shape",
                             [](const Tensor& t) {
                               py::tuple s(t.shape().size());
                               for (std::size_t i = 0; i < t.shape().size(); ++i) s[i] = t.shape()[i];
                               return s;
                             })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::rank)
      .def_property_readonly("size", &Tensor::numel)
      .def("__len__",
           [](const Tensor& t) {
             if (t.rank() == 0) throw py::type_error("len() of a 0-d tensor");
             return t.shape()[0];
           })
      .def("item", &Tensor::item, "The one value of a one-element tensor (a guard on it inside reel.jit).")
      .def("tolist",
           [](py::handle self) { return to_array(tensor_ref(self, "Tensor.tolist"), self).attr("tolist")(); })
      .def("values", &Tensor::values, "The values, row-major, as floats (a guard on them inside reel.jit).")
      .def("__bool__", [](const Tensor& t) { return static_cast<bool>(t); },
           "The truth of a one-element tensor; while traced, a guard on the branch taken.")
      .def("__float__", &Tensor::item)
      // As Python's int(float): the exact integer (truncated), ValueError for NaN,
      // OverflowError for an infinity; i64 tensors exactly.
      .def("__int__",
           [](const Tensor& t) -> py::object {
             const double v = t.item();  // checks one element; a guard while traced
             if (t.dtype() == DType::i64) return py::int_(t.data<int64_t>()[0]);
             PyObject* i = PyNumber_Long(py::float_(v).ptr());
             if (i == nullptr) throw py::error_already_set();
             return py::reinterpret_steal<py::object>(i);
           })
      .def("__repr__",
           [](py::handle self) {
             const Tensor& t = tensor_ref(self, "Tensor.__repr__");
             if (!t.defined()) return std::string("reel.Tensor(undefined)");
             const std::string values = py::str(to_array(t, self));
             return fmt::format("reel.Tensor({}, {})", values, type_str(t.dtype(), t.shape()));
           })
      // Tracker (reel.param, reel.back).
      .def("grad", &Tensor::grad, "A param's gradient accumulated by reel.back.")
      .def("zero_grad", &Tensor::zero_grad)
      .def("is_param", &Tensor::is_param)
      .def("assign",
           [](Tensor& t, py::handle values) -> Tensor& { return t.assign(as_tensor(values, "assign")); },
           py::return_value_policy::reference_internal,
           "Writes values into a param's own memory (Tracker's W.data .= values).");
  py::implicitly_convertible<py::array, Tensor>();
  tensor_type = reinterpret_cast<PyTypeObject*>(m.attr("Tensor").ptr());
  reinterpret_cast<PyHeapTypeObject*>(tensor_type)->as_buffer.bf_getbuffer = tensor_getbuffer;
}

// The functions that make tensors.
void bind_constructors(py::module_& m) {
  m.def("tensor", &make_tensor, py::arg("values"), py::arg("shape") = py::none(), py::arg("dtype") = py::none(),
        "A new tensor (a copy) of a number, nested list or array; f64 unless the array or `dtype` says otherwise.");
  m.def("from_numpy", [](py::array a) { return as_tensor(a, "from_numpy"); }, py::arg("array"),
        "A tensor sharing the array's memory (C-contiguous float32/float64/int64; others copied).");
  m.def("scalar", [](double v, py::handle dtype) { return scalar(v, to_dtype(dtype, "scalar")); }, py::arg("value"),
        py::arg("dtype") = DType::f64);
  m.def("zeros", [](const Shape& s, py::handle dtype) { return zeros(s, to_dtype(dtype, "zeros")); },
        py::arg("shape"), py::arg("dtype") = DType::f64);
  m.def("ones", [](const Shape& s, py::handle dtype) { return ones(s, to_dtype(dtype, "ones")); }, py::arg("shape"),
        py::arg("dtype") = DType::f64);
  m.def("full", [](const Shape& s, double v, py::handle dtype) { return full(s, v, to_dtype(dtype, "full")); },
        py::arg("shape"), py::arg("value"), py::arg("dtype") = DType::f64);
  m.def("randn",
        [](const Shape& s, py::handle seed, py::handle dtype) {
          return randn(s, seed_of(seed, "randn"), to_dtype(dtype, "randn"));
        },
        py::arg("shape"), py::arg("seed") = 0, py::arg("dtype") = DType::f64);
  m.def("rand",
        [](const Shape& s, py::handle seed, py::handle dtype) {
          return rand(s, seed_of(seed, "rand"), to_dtype(dtype, "rand"));
        },
        py::arg("shape"), py::arg("seed") = 0, py::arg("dtype") = DType::f64);
  m.def("arange", [](int64_t n, py::handle dtype) { return arange(n, to_dtype(dtype, "arange")); }, py::arg("n"),
        py::arg("dtype") = DType::i64);
}

// Tracker.jl's tracked parameters.
void bind_tracker(py::module_& m) {
  m.def("param", [](py::handle values) { return param(as_tensor(values, "param")); }, py::arg("values"),
        "A tracked parameter (a copy of the values): operations on it are recorded for reel.back.");
  m.def("back", [](const Tensor& y, py::object seed) {
    if (seed.is_none()) back(y);
    else back(y, as_tensor(seed, "back"));
  }, py::arg("y"), py::arg("seed") = py::none(), "Accumulates the gradients of y (weighted by seed) into its params.");
  m.def("detach", &detach, py::arg("x"), "The values of x, not tracked.");
  m.def("release_cached_memory", &release_cached_memory);
}

}  // namespace

void bind_tensor(py::module_& m) {
  bind_dtypes(m);
  bind_tensor_class(m);
  bind_constructors(m);
  bind_tracker(m);
}

}  // namespace reel::py_bind
