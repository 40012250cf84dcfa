// Loops from Python: reel.while_loop(cond, body, init, max_trips=None), reel::while_loop
// on a carry that is any Python tree of tensors (dicts, lists, tuples).
#include <fmt/format.h>

#include <optional>

#include "common.hpp"
#include "reel/ir/while_loop.hpp"

namespace reel::py_bind {

namespace {

PyObject* numpy_bool() {
  static PyObject* t = py::object(py::module_::import("numpy").attr("bool_")).release().ptr();  // never freed
  return t;
}

// cond's result as the tensor reel::while_loop takes: a tensor, or a Python bool or
// number (cond computed it from values it read: the loop then runs as Python's would).
Tensor cond_result(py::handle r) {
  if (is_tensor_like(r)) return as_tensor(r, "while_loop");
  if (py::isinstance<py::bool_>(r) || is_number(r) || PyObject_IsInstance(r.ptr(), numpy_bool()) == 1)
    return scalar(PyObject_IsTrue(r.ptr()) == 1 ? 1.0 : 0.0);
  throw Error(fmt::format("while_loop: expected cond to return a reel.Tensor of one element or a bool, got {}",
                          type_name(r)));
}

py::object while_loop_py(py::handle cond, py::handle body, py::handle init, std::optional<int64_t> max_trips) {
  for (const auto& [name, f] : {std::pair{"cond", cond}, std::pair{"body", body}})
    if (!PyCallable_Check(f.ptr()))
      throw Error(fmt::format("while_loop: expected {} to be a function, got {}", name, shown(f)));
  std::vector<Tensor> leaves;
  flatten(init, leaves, "while_loop");
  if (leaves.empty())
    throw Error(fmt::format("while_loop: expected an initial carry holding tensors, got {}", shown(init)));
  // A cond giving a Python value (a bool, a number), not a tensor, computed it from values
  // it read or from Python state, which no tape can hold: the loop is then Python's own,
  // each iteration run (and recorded, where traced) as written. (So cond runs once more,
  // on init, to see what it gives.)
  py::object goes_on = cond(init);
  if (!is_tensor_like(goes_on)) {
    const int64_t limit = detail::max_trips_of(WhileOptions{max_trips});
    py::object carry = py::reinterpret_borrow<py::object>(init);
    for (int64_t n = 0; cond_result(goes_on).item() != 0.0; ++n) {
      if (n == limit) throw_max_trips(limit);
      carry = body(carry);
      goes_on = cond(carry);
    }
    return carry;
  }
  // The carry as Python sees it: init's structure with these tensors.
  const auto as_py = [&](const std::vector<Tensor>& c) {
    std::size_t next = 0;
    return rebuild(init, c, next, false);
  };
  const auto c = [&](const std::vector<Tensor>& carry) { return cond_result(cond(as_py(carry))); };
  const auto b = [&](const std::vector<Tensor>& carry) {
    std::vector<Tensor> out;
    flatten(body(as_py(carry)), out, "while_loop");
    return out;
  };
  const std::vector<Tensor> out = while_loop(c, b, leaves, WhileOptions{max_trips});
  return as_py(out);
}

}  // namespace

void bind_loops(py::module_& m) {
  m.def("while_loop", &while_loop_py, py::arg("cond"), py::arg("body"), py::arg("init"), py::kw_only(),
        py::arg("max_trips") = py::none(),
        "while cond(carry): carry = body(carry), as reel::while_loop: cond and body are traced once, on init, and "
        "the loop is one operation (of a tape, compiled code, a gradient). init is a tensor or a tree of them "
        "(dicts, lists, tuples); body returns the carry's structure and types. A value body reads from the carry "
        "(item(), float(), tolist()) is checked at every iteration (reel.GuardFailure where it differs); a cond that "
        "reads one (`lambda x: x.item() < 10`), or returns a bool, makes the loop run as Python's own loop, each "
        "iteration recorded (cond is then called once more, on init). "
        "max_trips: cond still true after that many iterations is a reel.Error (None: no limit).");
}

}  // namespace reel::py_bind
