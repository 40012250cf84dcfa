// Pytrees (nested dicts, lists and tuples of tensors) and cache keys of Python arguments.
#include <fmt/format.h>

#include <cstring>
#include <unordered_set>

#include "common.hpp"

namespace reel::py_bind {

namespace {

bool is_namedtuple(py::handle h) { return py::isinstance<py::tuple>(h) && py::hasattr(h, "_fields"); }

// The key's tags: one byte per part.
enum class Tag : char { tensor = 'T', none = 'n', boolean = 'b', integer = 'i', big = 'I', real = 'f', string = 's',
                        list = 'l', tuple = 't', named = 'N', dict = 'd' };

void put_string(CacheKey& key, std::string_view s) {
  key.put(static_cast<uint64_t>(s.size()));
  key.append(s.data(), s.size());
}

}  // namespace

bool uninitialised(py::handle h) {
  if (!h || !PyObject_TypeCheck(h.ptr(), reinterpret_cast<PyTypeObject*>(py::detail::get_internals().instance_base)))
    return false;
  auto* inst = reinterpret_cast<py::detail::instance*>(h.ptr());
  if (!inst->owned) return false;  // a reference to a C++ object held elsewhere
  if (inst->simple_layout) return !inst->simple_holder_constructed;  // every class bound here: no type lookup
  for (const auto& vh : py::detail::values_and_holders(inst))
    if (!vh.holder_constructed()) return true;
  return false;
}

std::string type_name(py::handle h) {
  const std::string name = py::str(py::type::handle_of(h).attr("__name__"));
  if (uninitialised(h)) return fmt::format("uninitialised {0} (made by {0}.__new__ without __init__)", name);
  return name;
}

std::string shown(py::handle h) {
  if (uninitialised(h)) return type_name(h);
  std::string s = py::repr(h);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

py::int_ to_pyint(py::handle h, const char* op, const char* what) {
  const auto refuse = [&] { return Error(fmt::format("{}: expected an integer {}, got {}", op, what, type_name(h))); };
  if (PyBool_Check(h.ptr()) || PyFloat_Check(h.ptr()) || !PyIndex_Check(h.ptr())) throw refuse();
  PyObject* i = PyNumber_Index(h.ptr());
  if (i == nullptr) {
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
    PyErr_Clear();  // an array of several elements, say
    throw refuse();
  }
  return py::reinterpret_steal<py::int_>(i);
}

int64_t to_int(py::handle h, const char* op, const char* what) {
  const py::int_ i = to_pyint(h, op, what);
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow != 0)
    throw Error(fmt::format("{}: expected {} to fit in 64 bits (from -2**63 to 2**63 - 1), got {}", op, what,
                            std::string(py::str(py::handle(i)))));
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

bool is_sequence(py::handle h) {
  return py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h) ||
         (py::isinstance<py::array>(h) && py::reinterpret_borrow<py::array>(h).ndim() == 1);
}

std::vector<int64_t> to_ints(py::handle h, const char* op, const char* what) {
  if (!is_sequence(h)) {
    if (PyIndex_Check(h.ptr()) && !PyBool_Check(h.ptr())) return {to_int(h, op, what)};
    throw Error(fmt::format("{}: expected {} as an int or a list or tuple of ints, got {}", op, what, type_name(h)));
  }
  std::vector<int64_t> out;
  out.reserve(py::len(h));
  for (py::handle item : h) out.push_back(to_int(item, op, what));
  return out;
}

bool is_number(py::handle h) {
  if (PyFloat_Check(h.ptr()) || PyLong_Check(h.ptr())) return true;
  static PyObject* numpy_number = py::object(py::module_::import("numpy").attr("number")).release().ptr();  // never freed
  return PyObject_IsInstance(h.ptr(), numpy_number) == 1;
}

double to_double(py::handle h, const char* op, const char* what) {
  if (!is_number(h)) throw Error(fmt::format("{}: expected a number as {}, got {}", op, what, type_name(h)));
  const double v = PyFloat_AsDouble(h.ptr());
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw Error(fmt::format("{}: expected {} to be a real number that fits in a double, got {}", op, what, shown(h)));
  }
  return v;
}

void flatten(py::handle tree, std::vector<Tensor>& leaves, const char* op) {
  const WalkDepth depth;
  if (const Tensor* t = tensor_of(tree)) {
    leaves.push_back(*t);
  } else if (py::isinstance<py::array>(tree)) {
    leaves.push_back(as_tensor(tree, op));
  } else if (py::isinstance<py::list>(tree) || py::isinstance<py::tuple>(tree)) {
    for (py::handle item : tree) flatten(item, leaves, op);
  } else if (py::isinstance<py::dict>(tree)) {
    for (auto item : py::reinterpret_borrow<py::dict>(tree)) flatten(item.second, leaves, op);
  } else if (uninitialised(tree)) {  // not a plain value either
    throw Error(fmt::format("{}: expected tensors and plain values, got {}", op, type_name(tree)));
  }
}

py::object rebuild(py::handle like, std::span<const Tensor> leaves, std::size_t& next, bool plain_to_none) {
  const WalkDepth depth;
  if (is_tensor_like(like)) {
    if (next >= leaves.size())
      throw Error(fmt::format("reel: a tree has more tensors than the {} values given for it", leaves.size()));
    return to_py(leaves[next++]);
  }
  if (py::isinstance<py::list>(like)) {
    py::list out;
    for (py::handle item : like) out.append(rebuild(item, leaves, next, plain_to_none));
    return out;
  }
  if (py::isinstance<py::tuple>(like)) {
    py::tuple in = py::reinterpret_borrow<py::tuple>(like);
    py::tuple out(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) out[i] = rebuild(in[i], leaves, next, plain_to_none);
    if (is_namedtuple(like)) return py::type::handle_of(like)(*out);
    return out;
  }
  if (py::isinstance<py::dict>(like)) {
    py::dict out;
    for (auto item : py::reinterpret_borrow<py::dict>(like))
      out[item.first] = rebuild(item.second, leaves, next, plain_to_none);
    return out;
  }
  if (plain_to_none) return py::none();
  return py::reinterpret_borrow<py::object>(like);
}

std::vector<Tensor> result_tensors(py::handle result, const char* op) {
  std::vector<Tensor> out;
  // Every leaf must be a tensor: walk as flatten does, refusing plain values.
  std::function<void(py::handle)> walk = [&](py::handle h) {
    const WalkDepth depth;
    if (is_tensor_like(h)) out.push_back(as_tensor(h, op));
    else if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h))
      for (py::handle item : h) walk(item);
    else if (py::isinstance<py::dict>(h))
      for (auto item : py::reinterpret_borrow<py::dict>(h)) walk(item.second);
    else
      throw Error(fmt::format("{}: f must return tensors (a reel.Tensor, or dicts, lists and tuples of them), got {} "
                              "in its result",
                              op, type_name(h)));
  };
  walk(result);
  return out;
}

void append_key(CacheKey& key, py::handle arg, std::vector<Tensor>& tensors, const char* op,
                std::size_t argno) {
  const WalkDepth depth;
  if (const Tensor* t = tensor_of(arg)) {
    tensors.push_back(*t);
    key.put(Tag::tensor);
    key.put(t->dtype());
    key.put(static_cast<uint32_t>(t->rank()));
    for (int64_t d : t->shape()) key.put(d);
  } else if (py::isinstance<py::array>(arg)) {
    tensors.push_back(as_tensor(arg, op));
    const Tensor& t = tensors.back();
    key.put(Tag::tensor);
    key.put(t.dtype());
    key.put(static_cast<uint32_t>(t.rank()));
    for (int64_t d : t.shape()) key.put(d);
  } else if (arg.is_none()) {
    key.put(Tag::none);
  } else if (PyBool_Check(arg.ptr())) {
    key.put(Tag::boolean);
    key.put(arg.ptr() == Py_True);
  } else if (PyLong_Check(arg.ptr())) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(arg.ptr(), &overflow);
    if (overflow == 0) {
      key.put(Tag::integer);
      key.put(static_cast<int64_t>(v));
    } else {
      key.put(Tag::big);
      put_string(key, std::string(py::str(arg)));
    }
  } else if (PyFloat_Check(arg.ptr())) {
    key.put(Tag::real);
    const double v = PyFloat_AS_DOUBLE(arg.ptr());
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    key.put(bits);
  } else if (py::isinstance<py::str>(arg)) {
    key.put(Tag::string);
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(arg.ptr(), &n);
    if (s == nullptr) throw py::error_already_set();
    put_string(key, std::string_view(s, static_cast<std::size_t>(n)));
  } else if (py::isinstance<py::list>(arg) || py::isinstance<py::tuple>(arg)) {
    if (is_namedtuple(arg)) {
      // Keyed by the type's address, so the type is kept alive (never freed: another
      // type at its address would hit its paths).
      static std::unordered_set<PyObject*> keyed;
      PyObject* type = py::type::handle_of(arg).ptr();
      if (keyed.insert(type).second) Py_INCREF(type);
      key.put(Tag::named);
      key.put(static_cast<const void*>(type));
    } else {
      key.put(py::isinstance<py::list>(arg) ? Tag::list : Tag::tuple);
    }
    key.put(static_cast<uint64_t>(py::len(arg)));
    for (py::handle item : arg) append_key(key, item, tensors, op, argno);
  } else if (py::isinstance<py::dict>(arg)) {
    key.put(Tag::dict);
    key.put(static_cast<uint64_t>(py::len(arg)));
    for (auto item : py::reinterpret_borrow<py::dict>(arg)) {
      if (is_tensor_like(item.first) || py::isinstance<py::dict>(item.first) || py::isinstance<py::list>(item.first))
        throw Error(fmt::format("{}: argument {} is a dict with a key of type {}; keys are strings, numbers, bools "
                                "or None",
                                op, argno, type_name(item.first)));
      std::vector<Tensor> none;
      append_key(key, item.first, none, op, argno);
      append_key(key, item.second, tensors, op, argno);
    }
  } else {
    throw Error(fmt::format("{}: argument {} is {}{}; arguments are reel.Tensors, NumPy arrays, dicts, lists and "
                            "tuples of them, ints, floats, bools, strings and None (pass other values through a "
                            "closure: they become constants of what is traced)",
                            op, argno, uninitialised(arg) ? "" : "a ", type_name(arg)));
  }
}

void append_args_key(CacheKey& key, const py::tuple& args, std::vector<Tensor>& tensors, const char* op) {
  for (std::size_t i = 0; i < args.size(); ++i) append_key(key, args[i], tensors, op, i + 1);
}

std::vector<std::string> describe_all(const py::tuple& args) {
  std::vector<std::string> parts;
  parts.reserve(args.size());
  for (py::handle a : args) parts.push_back(describe(a));
  return parts;
}

std::string describe(py::handle arg) {
  const WalkDepth depth;
  if (is_tensor_like(arg)) {
    const Tensor t = as_tensor(arg, "reel");
    return fmt::format("tensor {}", type_str(t.dtype(), t.shape()));
  }
  if (arg.is_none()) return "None";
  if (PyBool_Check(arg.ptr())) return arg.ptr() == Py_True ? "bool true" : "bool false";
  if (PyLong_Check(arg.ptr())) return fmt::format("integer {}", std::string(py::str(arg)));
  if (PyFloat_Check(arg.ptr())) return fmt::format("number {}", std::string(py::repr(arg)));
  if (py::isinstance<py::str>(arg)) return fmt::format("string {}", std::string(py::repr(arg)));
  if (py::isinstance<py::list>(arg) || py::isinstance<py::tuple>(arg) || py::isinstance<py::dict>(arg)) {
    std::string out;
    if (py::isinstance<py::dict>(arg)) {
      for (auto item : py::reinterpret_borrow<py::dict>(arg))
        out += fmt::format("{}{}: {}", out.empty() ? "" : ", ", std::string(py::repr(item.first)), describe(item.second));
      return "{" + out + "}";
    }
    for (py::handle item : arg) out += fmt::format("{}{}", out.empty() ? "" : ", ", describe(item));
    return py::isinstance<py::list>(arg) ? "[" + out + "]" : "(" + out + ")";
  }
  return type_name(arg);
}

}  // namespace reel::py_bind
