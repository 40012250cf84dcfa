// Custom primitives with rules written in Python (reel.define_primitive,
// reel.custom_vjp) and applying any primitive by name (reel.apply). Each rule is called
// with the GIL held, from whatever thread runs it (compiled code runs without it).
#include <fmt/format.h>

#include "common.hpp"

namespace reel::py_bind {

namespace {

// `op`'s attribute `name`: an int, float, bool, string, dtype, tape, or a list of ints
// or of numbers (NumPy's integers and numbers too).
AttrValue to_attr(const char* op, const std::string& name, py::handle v) {
  const auto integer = [](py::handle h) { return PyIndex_Check(h.ptr()) && !PyBool_Check(h.ptr()); };
  const std::string what = fmt::format("attribute '{}'", name);
  if (PyBool_Check(v.ptr())) return v.ptr() == Py_True;
  // (A dtype before integers: a bound enum has __index__.)
  if (py::isinstance<DType>(v) && !uninitialised(v)) return v.cast<DType>();
  if (integer(v)) return to_int(v, op, what.c_str());
  if (is_number(v)) return to_double(v, op, what.c_str());
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<Tape>(v) && !uninitialised(v)) return TapeRef{std::make_shared<const Tape>(v.cast<Tape>())};
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    bool ints = true;
    for (py::handle item : v) ints = ints && integer(item);
    if (ints) return to_ints(v, op, what.c_str());
    std::vector<double> reals;
    for (py::handle item : v) reals.push_back(to_double(item, op, what.c_str()));
    return reals;
  }
  throw Error(fmt::format("{}: attribute '{}' is a {}; attributes are ints, floats, bools, strings, dtypes, tapes "
                          "and lists of ints or floats",
                          op, name, type_name(v)));
}

// The attributes of a call of `op`: None (none) or a dict {name: value}.
Attrs to_attrs(const char* op, py::handle d) {
  Attrs a;
  if (d.is_none()) return a;
  if (!py::isinstance<py::dict>(d))
    throw Error(fmt::format("{}: expected the attributes as a dict {{name: value}} (or None), got {}", op,
                            type_name(d)));
  for (auto item : py::reinterpret_borrow<py::dict>(d)) {
    const std::string name = py::str(item.first);
    a.set(name, to_attr(op, name, item.second));
  }
  return a;
}

py::dict from_attrs(const Attrs& a) {
  py::dict d;
  for (const auto& [name, value] : a.items())
    d[py::str(name)] = std::visit(
        [](const auto& v) -> py::object {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, TapeRef>) return py::cast(*v.tape);
          else return py::cast(v);
        },
        value);
  return d;
}

AttrKind attr_kind(const std::string& prim, const std::string& name, const std::string& kind) {
  static const std::pair<const char*, AttrKind> kinds[] = {
      {"integer", AttrKind::integer}, {"real", AttrKind::real},     {"shape", AttrKind::shape},
      {"ints", AttrKind::ints},       {"reals", AttrKind::reals},   {"boolean", AttrKind::boolean},
      {"string", AttrKind::string},   {"dtype", AttrKind::dtype},   {"axis", AttrKind::axis},
      {"axes", AttrKind::axes},       {"tape", AttrKind::tape}};
  for (const auto& [n, k] : kinds)
    if (kind == n) return k;
  throw Error(fmt::format("define_primitive: {}: attribute '{}' has kind '{}'; kinds are integer, real, shape, ints, "
                          "reals, boolean, string, dtype, axis, axes and tape",
                          prim, name, kind));
}

// A call's arguments: a list or tuple of tensors (or arrays).
std::vector<Tensor> argument_tensors(py::handle args, const char* op) {
  if (!py::isinstance<py::list>(args) && !py::isinstance<py::tuple>(args))
    throw Error(fmt::format("{}: expected the arguments as a list of tensors, got {}", op, type_name(args)));
  std::vector<Tensor> in;
  for (py::handle a : args) in.push_back(as_tensor(a, op));
  return in;
}

// A rule given to custom_vjp or define_primitive, which must be callable.
void check_rule(const char* op, const std::string& name, const char* rule, py::handle f) {
  if (!PyCallable_Check(f.ptr()))
    throw Error(fmt::format("{}: {}: expected a function as its {} rule, got {}", op, name, rule, shown(f)));
}

// A rule's result: a tensor (or array), as the primitive's value.
Tensor rule_tensor(const std::string& prim, const char* rule, py::handle r) {
  if (!is_tensor_like(r))
    throw Error(fmt::format("{}: its {} rule returned {}, expected a reel.Tensor", prim, rule, type_name(r)));
  return as_tensor(r, prim.c_str());
}

// A vjp rule's result: one gradient (or None) per argument.
std::vector<Tensor> rule_tensors(const std::string& prim, py::handle r) {
  if (!(py::isinstance<py::list>(r) || py::isinstance<py::tuple>(r)))
    throw Error(fmt::format("{}: its vjp rule returned {}, expected a list with one gradient (or None) per argument",
                            prim, type_name(r)));
  std::vector<Tensor> out;
  for (py::handle g : r) out.push_back(g.is_none() ? Tensor() : rule_tensor(prim, "vjp", g));
  return out;
}

// Calls a Python rule with the GIL; `attrs` is passed when the primitive declares some.
template <class... A>
py::object call_rule(const py::object& f, bool with_attrs, const Attrs& attrs, A&&... args) {
  if (with_attrs) return f(std::forward<A>(args)..., from_attrs(attrs));
  return f(std::forward<A>(args)...);
}

const Primitive& define_py(const std::string& name, int arity, py::object eager, py::object vjp, py::object jvp,
                           py::object type, bool pure, py::object attrs) {
  PrimitiveDef def;
  def.name = name;
  def.arity = arity;
  def.pure = pure;
  if (!attrs.is_none() && !py::isinstance<py::dict>(attrs))
    throw Error(fmt::format("define_primitive: {}: expected attrs as a dict {{name: kind}} (or None), got {}", name,
                            type_name(attrs)));
  if (!attrs.is_none())
    for (auto item : py::reinterpret_borrow<py::dict>(attrs))
      def.attrs.push_back({py::str(item.first), attr_kind(name, py::str(item.first), py::str(item.second))});
  const bool with_attrs = !def.attrs.empty();
  check_rule("define_primitive", name, "eager", eager);
  for (const auto& [rule, f] : {std::pair{"vjp", &vjp}, std::pair{"jvp", &jvp}, std::pair{"type", &type}})
    if (!f->is_none()) check_rule("define_primitive", name, rule, *f);
  auto e = hold(std::move(eager));
  def.eager = [e, name, with_attrs](std::span<const Tensor> x, const Attrs& a) {
    const AcquireGil gil;
    return rule_tensor(name, "eager", call_rule(*e, with_attrs, a, to_list(x)));
  };
  if (!vjp.is_none()) {
    auto r = hold(std::move(vjp));
    def.vjp = [r, name, with_attrs](const std::vector<Tensor>& x, const Tensor& out, const Tensor& dout,
                                    const Attrs& a) {
      const AcquireGil gil;
      return rule_tensors(name, call_rule(*r, with_attrs, a, to_list(x), to_py(out), to_py(dout)));
    };
  }
  if (!jvp.is_none()) {
    auto r = hold(std::move(jvp));
    def.jvp = [r, name, with_attrs](const std::vector<Tensor>& x, const Tensor& out, const std::vector<Tensor>& dx,
                                    const Attrs& a) {
      const AcquireGil gil;
      return rule_tensor(name, "jvp", call_rule(*r, with_attrs, a, to_list(x), to_py(out), to_list(dx)));
    };
  }
  if (!type.is_none()) {
    auto r = hold(std::move(type));
    def.type = [r, name, with_attrs](std::span<const VarType> ts, const Attrs& a) {
      const AcquireGil gil;
      py::list types;
      for (const VarType& t : ts) types.append(py::make_tuple(t.dtype, py::tuple(py::cast(t.shape))));
      py::object res = call_rule(*r, with_attrs, a, types);
      try {
        auto [dtype, shape] = res.cast<std::pair<py::object, Shape>>();
        return VarType{to_dtype(dtype, name.c_str()), shape};
      } catch (const py::cast_error&) {
        throw Error(fmt::format("{}: its type rule returned {}, expected (dtype, shape)", name,
                                std::string(py::repr(res))));
      }
    };
  }
  return define_primitive(std::move(def));
}

}  // namespace

void bind_custom(py::module_& m) {
  m.def(
      "define_primitive",
      [](const std::string& name, int arity, py::object eager, py::object vjp, py::object jvp, py::object type,
         bool pure, py::object attrs) {
        define_py(name, arity, std::move(eager), std::move(vjp), std::move(jvp), std::move(type), pure,
                  std::move(attrs));
      },
      py::arg("name"), py::arg("arity"), py::arg("eager"), py::arg("vjp") = py::none(), py::arg("jvp") = py::none(),
      py::arg("type") = py::none(), py::arg("pure") = true, py::arg("attrs") = py::none(),
      R"(Registers a primitive whose rules are Python functions written with reel operations:
eager(args) -> Tensor; vjp(args, out, dout) -> one gradient (or None) per argument;
jvp(args, out, tangents) -> the result's tangent (tangents None where zero);
type(types) -> (dtype, shape) from the arguments' [(dtype, shape)] (default: the first's).
With attrs={"name": "integer" | "real" | "ints" | ...}, each rule gets the call's
attributes as one more argument (a dict).)");
  m.def(
      "apply",
      [](const std::string& name, py::handle args, py::handle attrs) -> py::object {
        const std::vector<Tensor> in = argument_tensors(args, name.c_str());
        const Primitive& p = primitive(name);
        // Several results (a loop's: as many as its body gives) are a list.
        if (p.results != 1) return to_list(apply_results(p, in, to_attrs(name.c_str(), attrs)));
        return py::cast(apply(p, in, to_attrs(name.c_str(), attrs)));
      },
      py::arg("name"), py::arg("args"), py::arg("attrs") = py::none(),
      "Applies the primitive `name` (recorded as one call while tracing).");
  m.def(
      "custom_vjp",
      [](const std::string& name, py::handle args, py::object forward, py::object pullback) {
        const std::vector<Tensor> in = argument_tensors(args, name.c_str());
        // (None: the functions registered by the name's first call, reused.)
        if (!forward.is_none()) check_rule("custom_vjp", name, "forward", forward);
        if (!pullback.is_none()) check_rule("custom_vjp", name, "pullback", pullback);
        auto f = hold(std::move(forward));
        auto b = hold(std::move(pullback));
        return custom_vjp(
            name, in,
            [f, name](const std::vector<Tensor>& x) {
              const AcquireGil gil;
              return rule_tensor(name, "forward", (*f)(to_list(x)));
            },
            [b, name](const std::vector<Tensor>& x, const Tensor& out, const Tensor& dout) {
              const AcquireGil gil;
              return rule_tensors(name, (*b)(to_list(x), to_py(out), to_py(dout)));
            });
      },
      py::arg("name"), py::arg("args"), py::arg("forward"), py::arg("pullback"),
      "Tracker's track/@grad: forward(args) computed without tracing, its pullback(args, out, dout).");
  m.def("primitive_names", [] {
    std::vector<std::string> names;
    for (const Primitive* p : all_primitives()) names.push_back(p->name);
    return names;
  });
}

}  // namespace reel::py_bind
